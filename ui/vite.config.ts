// Build and test configuration. The Rust server embeds dist/ and serves it at `/`, so the base is
// absolute (`/assets/...`) and nothing is loaded from a CDN.
import { defineConfig } from 'vitest/config';
import { svelte } from '@sveltejs/vite-plugin-svelte';

export default defineConfig({
  plugins: [svelte()],
  base: '/',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2022',
    // The app's entry stays under the default warning size: Chat and Benchmarks load as their own
    // chunks the first time they are opened (App.svelte).
    sourcemap: false,
  },
  server: {
    // `npm run dev` against a running daemon: RIGDECK_URL=http://127.0.0.1:7878 npm run dev
    proxy: process.env.RIGDECK_URL
      ? {
          // The daemon checks Host and Origin, so both are rewritten to the daemon's own address.
          '/api': {
            target: process.env.RIGDECK_URL,
            ws: true,
            changeOrigin: true,
            headers: { origin: process.env.RIGDECK_URL },
          },
          '/login': { target: process.env.RIGDECK_URL, changeOrigin: true },
        }
      : undefined,
  },
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
  },
});

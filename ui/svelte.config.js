// Svelte compiler settings shared by Vite, svelte-check and Vitest: TypeScript in <script lang="ts">.
import { vitePreprocess } from '@sveltejs/vite-plugin-svelte';

export default {
  preprocess: vitePreprocess(),
};

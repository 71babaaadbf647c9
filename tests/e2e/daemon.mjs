// Starts a real `rigdeck serve` for a test or a benchmark: own config/data folders, a rig from a
// fixture through the NVML test double, a free loopback port; and finds Debian's chromium.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const fixtures = resolve(here, "../fixtures/rigs");

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the browser tests through \`make test-e2e\``);
  return value;
}

/** Starts the daemon and resolves once it prints its sign-in URL. `prepare({ configDir, dataDir })`
 *  runs first (to put models into `dataDir/models`, say); `env` adds to the daemon's environment;
 *  `dir` reuses the folders of an earlier daemon (one that was killed, say); `args` adds to
 *  `rigdeck serve`'s. */
/** A file the tests need, named by an environment variable that `make test-e2e` sets. */
export function requiredFile(name, what) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: it must name ${what} (\`make test-e2e\` prepares it)`);
  if (!existsSync(value)) throw new Error(`${name}=${value} does not exist: it must name ${what}`);
  return value;
}

export async function startDaemon(rigFile, { prepare, env = {}, dir: reuse, firstRun = false, args = [] } = {}) {
  const dir = reuse ?? mkdtempSync(join(tmpdir(), "rigdeck-e2e-"));
  const configDir = join(dir, "config");
  const dataDir = join(dir, "data");
  // A fresh daemon opens on the first-run page; the tests of other pages start past it.
  const settings = join(configDir, "settings.toml");
  if (!firstRun && !existsSync(settings)) {
    mkdirSync(configDir, { recursive: true });
    writeFileSync(settings, "welcome_skipped = true\n");
  }
  if (prepare) {
    try {
      await prepare({ configDir, dataDir });
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      throw e;
    }
  }
  const child = spawn(required("RIGDECK_BIN"), ["serve", "--bind", "127.0.0.1:0", ...args], {
    env: {
      ...process.env,
      ...env,
      RIGDECK_CONFIG_DIR: configDir,
      RIGDECK_DATA_DIR: dataDir,
      RIGDECK_NVML_LIBRARY: required("RIGDECK_NVML_LIBRARY"),
      RIGDECK_NVML_DOUBLE_RIG: join(fixtures, rigFile),
      RUST_LOG: "warn",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stderr.on("data", (chunk) => (log += chunk));
  // Not on a terminal, the daemon prints where it listens and where its token is, never the token.
  const base = await new Promise((resolveUrl, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`rigdeck serve did not start in 30 s:\n${log}`)), 30_000);
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const match = out.match(/Sign in at (http:\/\/[^\s/]+)\//);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`rigdeck serve exited with ${code}:\n${log}`)));
  });
  const token = readFileSync(join(configDir, "token"), "utf8").trim();
  const loginUrl = `${base}/login?token=${encodeURIComponent(token)}`;
  return {
    child,
    loginUrl,
    dataDir,
    base,
    token,
    dir,
    log: () => log,
    /** SIGKILL, as a crash or the OOM killer would: engines stay, the folders too. */
    async kill() {
      child.kill("SIGKILL");
      await new Promise((done) => (child.exitCode !== null || child.signalCode !== null ? done() : child.on("exit", done)));
    },
    async stop() {
      child.kill("SIGTERM");
      await new Promise((done) => (child.exitCode !== null ? done() : child.on("exit", done)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Debian's chromium, never a downloaded browser. */
export async function launchChromium() {
  const executablePath = execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim();
  return chromium.launch({
    executablePath,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
}

export function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

/** A call to the daemon's API with its admin token: the status, the body (JSON, else text) and
 *  the headers. */
export async function adminRequest(daemon, method, path, body) {
  const res = await fetch(`${daemon.base}${path}`, {
    method,
    headers: { authorization: `Bearer ${daemon.token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

// The stand-in for the Hugging Face hub (crates/hub/examples/fake_hub) as a process the daemon
// can reach: a spec names the repositories and their files (generated, or real files from disk).
import { spawn } from "node:child_process";

/** Starts the fake hub on a spec file and resolves with `{ child, url }` once it serves. */
export async function startFakeHub(specPath) {
  const program = process.env.RIGDECK_FAKE_HUB;
  if (!program) throw new Error("RIGDECK_FAKE_HUB is not set: run the browser tests through `make test-e2e`");
  const child = spawn(program, [specPath], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  child.stderr.on("data", (chunk) => (log += chunk));
  const url = await new Promise((resolveUrl, reject) => {
    let out = "";
    // It hashes the served files first (a few hundred MB take seconds).
    const timer = setTimeout(() => reject(new Error(`fake_hub did not start in 60 s:\n${log}`)), 60_000);
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const line = out.split("\n")[0];
      if (out.includes("\n") && /^https?:\/\//.test(line)) {
        clearTimeout(timer);
        resolveUrl(line.trim());
      }
    });
    child.on("exit", (code) => reject(new Error(`fake_hub exited with ${code}:\n${log}`)));
  });
  return { child, url };
}

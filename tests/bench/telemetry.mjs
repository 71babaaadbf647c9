// Telemetry cost of `rigdeck serve`: 8 GPUs (NVML test double) + host sampled at 1 Hz.
// Two phases side by side in one run: the daemon alone, then with a browser on the dashboard.
// Reports CPU time per sample, share of one core, the largest RSS during the phase (VmRSS read
// each second) and the process's peak since it started (VmHWM: the first start's one-time memory
// bandwidth probe touches up to 1 GiB for about a second, then frees it).
// Run with `make bench`; BENCH_SECONDS changes the length of each phase (default 60).
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { startDaemon, launchChromium } from "../e2e/daemon.mjs";

const seconds = Number(process.env.BENCH_SECONDS ?? 60);
const clockTicks = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

/** utime + stime of a process, in milliseconds. */
function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks;
}

/** A `/proc/<pid>/status` memory field (VmRSS, VmHWM) in MB. */
function statusMb(pid, field) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(status.match(new RegExp(`${field}:\\s+(\\d+) kB`))[1]);
  return kb / 1024;
}

async function measure(label, withBrowser) {
  const daemon = await startDaemon("8gpu-bench.json");
  let browser;
  try {
    if (withBrowser) {
      browser = await launchChromium();
      const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      await page.goto(daemon.loginUrl);
      await page.locator('[data-testid="gpu-card"]').nth(7).waitFor({ timeout: 30_000 });
    }
    await sleep(3000); // past start-up work: first samples, database creation
    const pid = daemon.child.pid;
    const start = cpuMs(pid);
    const t0 = performance.now();
    let rssMb = statusMb(pid, "VmRSS");
    for (let s = 0; s < seconds; s++) {
      await sleep(1000);
      rssMb = Math.max(rssMb, statusMb(pid, "VmRSS"));
    }
    const elapsedS = (performance.now() - t0) / 1000;
    const used = cpuMs(pid) - start;
    const samples = Math.round(elapsedS); // one sample a second
    return { label, samples, cpuMsPerSample: used / samples, corePct: (used / 10) / elapsedS, peakRssMb: rssMb, startPeakMb: statusMb(pid, "VmHWM") };
  } finally {
    await browser?.close();
    await daemon.stop();
  }
}

const idle = await measure("daemon alone", false);
const watched = await measure("daemon + 1 browser", true);
console.log(`\nrigdeck serve, 8 GPUs + host at 1 Hz, ${seconds} s per phase (CPU time from /proc/<pid>/stat)\n`);
console.log("| phase | samples | CPU ms / sample | % of one core | peak RSS in the phase (MB) | peak since start, VmHWM (MB) |");
console.log("|---|---|---|---|---|---|");
for (const r of [idle, watched]) {
  console.log(`| ${r.label} | ${r.samples} | ${r.cpuMsPerSample.toFixed(2)} | ${r.corePct.toFixed(2)} | ${r.peakRssMb.toFixed(1)} | ${r.startPeakMb.toFixed(1)} |`);
}
console.log(`\nbrowser / alone: CPU ×${(watched.cpuMsPerSample / idle.cpuMsPerSample).toFixed(2)}, RSS ×${(watched.peakRssMb / idle.peakRssMb).toFixed(2)}`);
console.log(`target: < 1 % of one core and < 60 MB RSS with one browser: ${watched.corePct < 1 && watched.peakRssMb < 60 ? "met" : "NOT met"}`);

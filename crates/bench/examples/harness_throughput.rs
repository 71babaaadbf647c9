//! How many streamed tokens a second the benchmark harness keeps up with, and whether its figures
//! stay true while it does. The truth server (`tests/support/truth_server.rs`, on its own thread
//! and runtime) streams many answers with 0–1 ms between tokens; the production `Runner` drives
//! it on a two-worker runtime, a cold run and warm runs of one concurrency step. Prints per run
//! the streamed tokens/s across all streams (the harness's own aggregate figure and the server's
//! count), the CPU time the harness and the server each used, and the harness's TTFT, ITL and
//! TPOT percentiles against the truth (TTFT counted from the harness's send instant, as it
//! defines it; the time from there to the server having the request is printed apart).
//!
//!   cargo run --release -p rigdeck-bench --example harness_throughput -- \
//!       [--streams 64] [--tokens 1000] [--warm-runs 4] [--itl-ms 0.5] [--jitter 1.0]
//!
//! `--itl-ms` is the mean gap and `--jitter` its uniform spread as a fraction (0.5 ms ± 100 % is
//! 0–1 ms). Answers are `--tokens` long, less up to one token per stream (lengths cycle so the
//! harness's samples pair with the server's truths). CPU times come from `/proc/self/task`
//! (Linux, in clock ticks of 10 ms).

#[path = "../tests/support/truth_server.rs"]
mod truth_server;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rigdeck_bench::{BenchSpec, Outcome, Runner, Shape, StepResult, StepSink};
use tokio::sync::watch;
use truth_server::{compare, pair, spread, Config, Figures, TruthServer};

/// What the command line asked for.
struct Args {
    streams: u32,
    tokens: u32,
    warm_runs: u32,
    itl_ms: f64,
    jitter: f64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        streams: 64,
        tokens: 1000,
        warm_runs: 4,
        itl_ms: 0.5,
        jitter: 1.0,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--streams" => args.streams = value.parse().map_err(|e| bad(&e))?,
            "--tokens" => args.tokens = value.parse().map_err(|e| bad(&e))?,
            "--warm-runs" => args.warm_runs = value.parse().map_err(|e| bad(&e))?,
            "--itl-ms" => args.itl_ms = value.parse().map_err(|e| bad(&e))?,
            "--jitter" => args.jitter = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {flag} (see the file's header)")),
        }
    }
    if args.streams == 0 || args.tokens < args.streams + 1 {
        return Err("use at least 1 stream and more tokens than streams".into());
    }
    Ok(args)
}

/// Keeps every step the runner reports, and when each run was reported.
#[derive(Default)]
struct Collect(Mutex<Vec<StepResult>>);

impl StepSink for Collect {
    async fn step(&self, step: &StepResult) {
        self.0
            .lock()
            .expect("the sink is never poisoned")
            .push(step.clone());
    }
}

/// CPU seconds used so far by this process's threads: (the truth server's, everything else's).
fn cpu_seconds() -> (f64, f64) {
    const TICKS_PER_SECOND: f64 = 100.0;
    let (mut server, mut rest) = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (f64::NAN, f64::NAN);
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        // After the name: state, then 10 fields, then utime and stime.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let seconds = (ticks(11) + ticks(12)) / TICKS_PER_SECOND;
        if name.starts_with("truth-server") {
            server += seconds;
        } else {
            rest += seconds;
        }
    }
    (server, rest)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("harness_throughput: {message}");
            std::process::exit(2);
        }
    };
    let config = Config {
        ttft: Duration::from_millis(20),
        ttft_jitter: 0.1,
        itl: Duration::from_secs_f64(args.itl_ms / 1000.0),
        itl_jitter: args.jitter,
        tokens: (args.tokens - args.streams + 1)..=args.tokens,
        ..Config::default()
    };
    let server = TruthServer::start(config.clone());
    let spec = BenchSpec {
        shapes: vec![Shape {
            prompt_tokens: 32,
            output_tokens: args.tokens,
        }],
        concurrency: vec![args.streams],
        warm_runs: args.warm_runs,
        seed: 5,
        request_timeout_s: 600,
        ..BenchSpec::default()
    };
    println!(
        "truth server: {} streams × {}–{} tokens, TTFT {:?} ± 10 %, ITL {:.3} ms ± {:.0} %; harness: production Runner on a 2-worker runtime, {} warm runs",
        args.streams,
        config.tokens.start(),
        config.tokens.end(),
        config.ttft,
        args.itl_ms,
        args.jitter * 100.0,
        args.warm_runs,
    );
    let mut runner = match Runner::prepare(server.endpoint(), spec).await {
        Ok(runner) => runner,
        Err(message) => {
            eprintln!("harness_throughput: {message}");
            std::process::exit(1);
        }
    };
    let sink = Collect::default();
    let (_keep_open, cancel) = watch::channel(false);
    let (cpu_before, began) = (cpu_seconds(), Instant::now());
    let outcome = runner.run(&sink, cancel).await;
    let (cpu_after, elapsed) = (cpu_seconds(), began.elapsed());
    if outcome != Outcome::Done {
        eprintln!("harness_throughput: the benchmark ended {outcome:?}");
        std::process::exit(1);
    }
    let reports = sink.0.lock().expect("the sink is never poisoned").clone();
    let Some(step) = reports.last() else {
        eprintln!("harness_throughput: no step was reported");
        std::process::exit(1);
    };
    let Some(summary) = step.summary.as_ref() else {
        eprintln!("harness_throughput: the step has no summary");
        std::process::exit(1);
    };
    let truths = server.truths();

    println!("\nrun   wall ms   tokens   harness tok/s   server tok/s   failed");
    let mut rest = truths.as_slice();
    let (mut warm_tokens, mut warm_wall_ms) = (0u64, 0.0f64);
    for run in &step.runs {
        let (mine, next) = rest.split_at(run.requests.len().min(rest.len()));
        rest = next;
        let written: usize = mine.iter().map(|t| t.texts.len()).sum();
        let first = mine.iter().map(|t| t.arrived).min();
        let last = mine.iter().filter_map(|t| t.texts.last()).max();
        let server_tps = match (first, last) {
            (Some(first), Some(last)) if last > &first => {
                written as f64 / last.duration_since(first).as_secs_f64()
            }
            _ => f64::NAN,
        };
        println!(
            "{:<5} {:>8.1} {:>8} {:>15.0} {:>14.0} {:>8}",
            if run.cold {
                format!("{}c", run.index)
            } else {
                run.index.to_string()
            },
            run.wall_ms,
            run.output_tokens,
            run.aggregate_tps.unwrap_or(f64::NAN),
            server_tps,
            run.failed,
        );
        if !run.cold {
            warm_tokens += run.output_tokens;
            warm_wall_ms += run.wall_ms;
        }
    }
    let achieved = warm_tokens as f64 / (warm_wall_ms / 1000.0);
    let (server_cpu, other_cpu) = (cpu_after.0 - cpu_before.0, cpu_after.1 - cpu_before.1);
    let all_tokens: u64 = step.runs.iter().map(|r| r.output_tokens).sum();
    println!(
        "\nachieved: {achieved:.0} streamed tokens/s across {} streams (warm runs: {warm_tokens} tokens in {:.2} s)",
        args.streams,
        warm_wall_ms / 1000.0
    );
    println!(
        "CPU over the whole benchmark ({:.2} s wall, {all_tokens} tokens): harness and runtime {other_cpu:.2} s ({:.1} µs a token), truth server {server_cpu:.2} s ({:.1} µs a token); harness alone on 2 cores ≈ {:.0} tokens/s",
        elapsed.as_secs_f64(),
        other_cpu * 1e6 / all_tokens as f64,
        server_cpu * 1e6 / all_tokens as f64,
        2.0 * all_tokens as f64 / other_cpu,
    );
    println!(
        "connections opened: {} for {} requests",
        server.connections(),
        server.requests()
    );

    let paired = match pair(&step.runs, &truths, &server.scrapes()) {
        Ok(paired) => paired,
        Err(message) => {
            eprintln!("harness_throughput: cannot pair samples with truths: {message}");
            std::process::exit(1);
        }
    };
    let deviations = match compare(
        &Figures::of_summary(summary),
        &Figures::of_truth(&paired),
        0.02,
        0.5,
    ) {
        Ok(deviations) => deviations,
        Err(message) => {
            eprintln!("harness_throughput: {message}");
            std::process::exit(1);
        }
    };
    println!(
        "\nmeasured vs truth over the warm runs (allowed: 2 % or 0.5 ms, whichever is larger):"
    );
    for deviation in &deviations {
        println!("  {deviation}");
    }
    println!(
        "  send → arrival (in the harness's TTFT, not the server's): {}",
        spread(&paired.delivery)
    );
    println!(
        "  TTFT from arrival (the server's view):                     {}",
        spread(&paired.ttft_from_arrival)
    );
    println!(
        "  server lateness (its 1 ms timer's rounding and its thread's waits): {}",
        spread(&paired.lateness)
    );
    let outside = deviations.iter().filter(|d| !d.within()).count();
    println!(
        "\n{}: {achieved:.0} tokens/s {} 20 000; {outside} of {} percentiles outside their margin",
        if achieved >= 20_000.0 && outside == 0 {
            "PASS"
        } else {
            "FAIL"
        },
        if achieved >= 20_000.0 { "≥" } else { "<" },
        deviations.len(),
    );
}

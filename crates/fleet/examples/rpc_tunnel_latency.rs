//! The RPC tunnel's cost in isolation: two fleets in one process (each on a runtime of its own,
//! as two daemons), paired over a real TLS listener on loopback; the lender lends a stand-in
//! `rpc-server` (this same program, re-run with `-H HOST -p PORT -d DEVICES`: it lists one
//! device, then answers each request with as many bytes as it asks for). The same exchanges go
//! to the stand-in directly and through the lease's tunnel, alternated, best round kept:
//! 64-byte request/response round trips, 1 MB answers to a small request (a token's logits) and
//! 1 MB requests with a small answer (weights sent). Prints time per exchange and this
//! process's CPU time per exchange (the client's share is the same both ways; the tunnel's
//! extra is the two daemons').
//!
//! `cargo run --release -p rigdeck-fleet --example rpc_tunnel_latency [ROUND_TRIPS] [ROUNDS]`

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rigdeck_fleet::rpc_lend::{LendingBuild, RpcBuild};
use rigdeck_fleet::Fleet;
use tokio::runtime::Runtime;
use tokio::sync::watch;

const MIGRATION: &str = include_str!("../../core/migrations/20261204000001_fleet_peers.sql");
/// A request: the bytes that follow it, then the bytes asked back (little-endian u64 each).
const HEADER: usize = 16;
const SMALL: usize = 64;
const LARGE: usize = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("-H") {
        return stand_in_rpc_server(&args);
    }
    let round_trips: usize = args.get(1).map_or(Ok(10_000), |a| a.parse())?;
    let rounds: usize = args.get(2).map_or(Ok(3), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let (lender_rt, head_rt) = (daemon_runtime()?, daemon_runtime()?);
    let (_stop, stop_rx) = watch::channel(false);
    let lender = lender_rt.block_on(daemon(dir.path(), "lender", true, stop_rx.clone()))?;
    let head = head_rt.block_on(daemon(dir.path(), "head", false, stop_rx))?;
    let build = RpcBuild {
        version: "stand-in".into(),
        commit: None,
    };
    let program = std::env::current_exe()?;
    let lent = LendingBuild {
        rpc_server: program,
        build: build.clone(),
    };
    lender.lend_with(Arc::new(move || {
        let lent = lent.clone();
        Box::pin(async move { Ok(lent) })
    }));
    let code = lender_rt.block_on(lender.invite(None, Duration::from_secs(600)))?;
    head_rt.block_on(head.join(&code.code))?;
    let taken =
        head_rt.block_on(head.take_rpc_lease("lender", vec!["CPU".into()], build.clone()))?;
    let tunnel: SocketAddr = taken.endpoint.parse()?;
    let direct = lender.rpc_leases().lent[0].listen;
    println!("direct: {direct}; tunnel: {tunnel} (lease {})", taken.lease);
    println!("| exchange | way | median µs | mean µs | CPU µs per exchange (this process) |");
    println!("|---|---|---|---|---|");
    let exchanges = [
        ("64 B ↔ 64 B", SMALL, SMALL, round_trips),
        ("64 B → 1 MB", SMALL, LARGE, round_trips / 50),
        ("1 MB → 64 B", LARGE, SMALL, round_trips / 50),
    ];
    for (name, ask, answer, count) in exchanges {
        let mut best = [None, None];
        for _ in 0..rounds {
            for (slot, address) in [direct, tunnel].into_iter().enumerate() {
                let measured = exchange(address, ask, answer, count.max(5))?;
                best[slot] = Some(match best[slot] {
                    Some(b) if faster(&b, &measured) => b,
                    _ => measured,
                });
            }
        }
        for (way, measured) in ["direct", "tunnel"].iter().zip(best.iter().flatten()) {
            println!(
                "| {name} | {way} | {:.1} | {:.1} | {:.1} |",
                measured.median_us, measured.mean_us, measured.cpu_us
            );
        }
    }
    head_rt.block_on(head.release_rpc_lease(&taken.lease))?;
    Ok(())
}

fn daemon_runtime() -> std::io::Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

async fn daemon(
    root: &Path,
    name: &str,
    listen: bool,
    stop: watch::Receiver<bool>,
) -> Result<Arc<Fleet>, Box<dyn std::error::Error>> {
    let folder = root.join(name);
    std::fs::create_dir_all(folder.join("fleet"))?;
    std::fs::write(folder.join("fleet/name"), name)?;
    let url = format!("sqlite://{}?mode=rwc", folder.join("rigdeck.db").display());
    let pool = sqlx::sqlite::SqlitePoolOptions::new().connect(&url).await?;
    sqlx::raw_sql(MIGRATION).execute(&pool).await?;
    let bind = listen.then(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    Ok(rigdeck_fleet::start(&folder.join("fleet"), pool, bind, "bench", stop).await?)
}

#[derive(Clone, Copy)]
struct Measured {
    median_us: f64,
    mean_us: f64,
    cpu_us: f64,
}

fn faster(a: &Measured, b: &Measured) -> bool {
    a.median_us <= b.median_us
}

/// `count` exchanges of `ask` bytes out and `answer` bytes back on one connection.
fn exchange(
    address: SocketAddr,
    ask: usize,
    answer: usize,
    count: usize,
) -> std::io::Result<Measured> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_nodelay(true)?;
    let mut request = vec![0u8; ask.max(HEADER)];
    request[..8].copy_from_slice(&((ask.max(HEADER) - HEADER) as u64).to_le_bytes());
    request[8..16].copy_from_slice(&(answer as u64).to_le_bytes());
    let mut reply = vec![0u8; answer];
    // One exchange first: the tunnel's connection and upgrade are not what is measured.
    stream.write_all(&request)?;
    stream.read_exact(&mut reply)?;
    let mut times = Vec::with_capacity(count);
    let cpu_before = cpu_time();
    for _ in 0..count {
        let started = Instant::now();
        stream.write_all(&request)?;
        stream.read_exact(&mut reply)?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let cpu = cpu_time() - cpu_before;
    times.sort_by(f64::total_cmp);
    Ok(Measured {
        median_us: times[times.len() / 2],
        mean_us: times.iter().sum::<f64>() / times.len() as f64,
        cpu_us: cpu * 1e6 / count as f64,
    })
}

/// This process's user + system seconds (all its threads), from `/proc/self/stat`.
fn cpu_time() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are the 14th and 15th fields; the name and state come first.
    (ticks(11) + ticks(12)) / clock_ticks()
}

/// `/proc`'s clock ticks a second (`USER_HZ`, 100 on Linux whatever the kernel's own tick).
fn clock_ticks() -> f64 {
    100.0
}

/// The stand-in `rpc-server`: `-H HOST -p PORT -d DEVICES`, one device listed as llama.cpp's
/// does, each connection served on a thread of its own.
fn stand_in_rpc_server(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .ok_or_else(|| format!("the stand-in rpc-server needs {flag}"))
    };
    let listener = TcpListener::bind(format!("{}:{}", value("-H")?, value("-p")?))?;
    println!("  CPU: stand-in (1024 MiB, 1024 MiB free)");
    for stream in listener.incoming() {
        let stream = stream?;
        println!("Accepted client connection");
        std::thread::spawn(move || answer_requests(stream));
    }
    Ok(())
}

fn answer_requests(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut body = vec![0u8; LARGE];
    let answer = vec![0u8; LARGE];
    loop {
        let mut header = [0u8; HEADER];
        if stream.read_exact(&mut header).is_err() {
            return Ok(());
        }
        let length = |range: std::ops::Range<usize>| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&header[range]);
            (u64::from_le_bytes(bytes) as usize).min(LARGE)
        };
        let (asked, answered) = (length(0..8), length(8..16));
        stream.read_exact(&mut body[..asked])?;
        stream.write_all(&answer[..answered])?;
    }
}

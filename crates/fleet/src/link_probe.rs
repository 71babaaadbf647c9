//! The link between two paired daemons, measured over one pinned channel connection kept alive:
//! a few empty round trips (their median is the latency), then one bulk answer of zero bytes
//! streamed by the peer (`GET /fleet/v1/probe?bytes=N`) and counted as it arrives (the bytes after
//! the first over the time after the first is the throughput).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{Extension, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Frame, SizeHint};
use hyper::client::conn::http1::SendRequest;
use serde::{Deserialize, Serialize};

use crate::channel::Caller;
use crate::error::{FleetError, FleetErrorKind};
use crate::service::Fleet;

/// The probe's route on the channel.
pub const PROBE_PATH: &str = "/fleet/v1/probe";
/// The most one probe answer carries: a peer cannot make this daemon send gigabytes.
pub const MAX_PROBE_BYTES: u64 = 64 << 20;
/// One chunk of the streamed answer.
const CHUNK_BYTES: usize = 256 << 10;
static ZEROS: [u8; CHUNK_BYTES] = [0; CHUNK_BYTES];

/// How a link is measured: the round trips timed, the bulk answer's size, and how long the bulk
/// transfer may run before it stops early (a slow link is measured on what arrived by then).
#[derive(Debug, Clone, Copy)]
pub struct ProbePlan {
    pub round_trips: usize,
    pub bulk_bytes: u64,
    pub bulk_time_cap: Duration,
}

impl Default for ProbePlan {
    /// 7 round trips, then 32 MiB (about 0.3 s on 1 GbE), stopped after 2 s.
    fn default() -> Self {
        ProbePlan {
            round_trips: 7,
            bulk_bytes: 32 << 20,
            bulk_time_cap: Duration::from_secs(2),
        }
    }
}

/// What one measurement saw.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkMeasurement {
    /// Round trips timed, all on the connection the bulk transfer used.
    pub round_trips: usize,
    /// Their median, in seconds.
    pub median_round_trip_s: f64,
    /// Bytes of the bulk answer that arrived (fewer than asked when the time cap stopped it).
    pub bytes: u64,
    /// Bytes that arrived after the first chunk, and the seconds from the first chunk to the last.
    pub bytes_after_first: u64,
    pub seconds_after_first: f64,
    /// `bytes_after_first / seconds_after_first`.
    pub throughput_bytes_per_s: u64,
}

impl LinkMeasurement {
    /// One way's latency: half the median round trip.
    pub fn latency_s(&self) -> f64 {
        self.median_round_trip_s / 2.0
    }

    /// The figures for a message: throughput, median round trip, and what they came from.
    pub fn describe(&self) -> String {
        format!(
            "{} MB/s ({:.1} MiB in {:.3} s after the first byte), median round trip {:.2} ms of {}, over one connection",
            megabytes(self.throughput_bytes_per_s),
            self.bytes_after_first as f64 / (1 << 20) as f64,
            self.seconds_after_first,
            self.median_round_trip_s * 1e3,
            self.round_trips
        )
    }
}

/// Bytes per second as MB/s, with two decimals under 10 MB/s (a shaped or Wi-Fi link).
fn megabytes(bytes_per_s: u64) -> String {
    let mb = bytes_per_s as f64 / 1e6;
    match mb < 10.0 {
        true => format!("{mb:.2}"),
        false => format!("{mb:.0}"),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct ProbeQuery {
    #[serde(default)]
    bytes: u64,
}

/// `GET /fleet/v1/probe?bytes=N`: N zero bytes streamed to a pinned peer (at most
/// [`MAX_PROBE_BYTES`]).
pub(crate) async fn probe(
    State(fleet): State<Arc<Fleet>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ProbeQuery>,
) -> Response {
    if let Err(err) = fleet.pinned(caller).await {
        return err.into_response();
    }
    if query.bytes > MAX_PROBE_BYTES {
        return FleetError::new(
            FleetErrorKind::BadInput,
            format!(
                "a probe sends at most {MAX_PROBE_BYTES} bytes, not {}: ask for fewer",
                query.bytes
            ),
        )
        .into_response();
    }
    let body = axum::body::Body::new(Zeros { left: query.bytes });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        body,
    )
        .into_response()
}

/// A body of `left` zero bytes, made a chunk at a time as the connection takes them.
struct Zeros {
    left: u64,
}

impl hyper::body::Body for Zeros {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(CHUNK_BYTES as u64) as usize;
        self.left -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&ZEROS[..n])))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

/// Measures the link over `sender` (one open channel connection): `plan.round_trips` empty
/// probes, then one of `plan.bulk_bytes` read as it streams.
pub async fn measure(
    sender: &mut SendRequest<Empty<Bytes>>,
    plan: ProbePlan,
) -> Result<LinkMeasurement, String> {
    let mut trips = Vec::with_capacity(plan.round_trips);
    for _ in 0..plan.round_trips.max(1) {
        let started = Instant::now();
        let body = ask(sender, 0).await?;
        body.collect()
            .await
            .map_err(|err| format!("the probe's answer broke off: {err}"))?;
        trips.push(started.elapsed().as_secs_f64());
    }
    trips.sort_by(f64::total_cmp);
    let median_round_trip_s = trips[trips.len() / 2];
    let bulk = ask(sender, plan.bulk_bytes.min(MAX_PROBE_BYTES)).await?;
    let (bytes, bytes_after_first, seconds_after_first) = count(bulk, plan.bulk_time_cap).await?;
    if bytes_after_first == 0 || seconds_after_first <= 0.0 {
        return Err(format!(
            "the probe's answer came in one piece ({bytes} bytes): nothing to time"
        ));
    }
    Ok(LinkMeasurement {
        round_trips: trips.len(),
        median_round_trip_s,
        bytes,
        bytes_after_first,
        seconds_after_first,
        throughput_bytes_per_s: (bytes_after_first as f64 / seconds_after_first).max(1.0) as u64,
    })
}

/// The answer's body to `GET /fleet/v1/probe?bytes=N`, once its head says it is one.
async fn ask(
    sender: &mut SendRequest<Empty<Bytes>>,
    bytes: u64,
) -> Result<hyper::body::Incoming, String> {
    sender
        .ready()
        .await
        .map_err(|err| format!("the connection closed before the probe: {err}"))?;
    let request = hyper::Request::get(format!("{PROBE_PATH}?bytes={bytes}"))
        .header(header::HOST, "rigdeck-fleet")
        .body(Empty::new())
        .map_err(|err| err.to_string())?;
    let answer = sender
        .send_request(request)
        .await
        .map_err(|err| format!("the probe got no answer: {err}"))?;
    if !answer.status().is_success() {
        let status = answer.status();
        let body = answer.into_body().collect().await.map(|b| b.to_bytes());
        let said = body
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "no explanation (update Rigdeck there)".to_owned());
        return Err(format!("it answered the probe with {status}: {said}"));
    }
    Ok(answer.into_body())
}

/// Reads `body` until its end or `cap` after its first chunk: all bytes, the bytes after the
/// first chunk, and the seconds from the first chunk to the last.
async fn count(mut body: hyper::body::Incoming, cap: Duration) -> Result<(u64, u64, f64), String> {
    let mut bytes = 0u64;
    let mut first: Option<(Instant, u64)> = None;
    let mut last = Instant::now();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| format!("the probe's answer broke off: {err}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        last = Instant::now();
        bytes += data.len() as u64;
        let (started, _) = *first.get_or_insert((last, bytes));
        if last.duration_since(started) > cap {
            break;
        }
    }
    let Some((started, first_bytes)) = first else {
        return Err("the probe's answer was empty".to_owned());
    };
    Ok((
        bytes,
        bytes - first_bytes,
        last.duration_since(started).as_secs_f64(),
    ))
}

impl Fleet {
    /// The link to the paired peer `name`, measured over one new connection to it.
    pub async fn measure_link(
        &self,
        name: &str,
        plan: ProbePlan,
    ) -> Result<LinkMeasurement, FleetError> {
        let peer = self.peer(name).await?;
        let address = peer.address.clone().ok_or_else(|| {
            FleetError::new(
                FleetErrorKind::Unavailable,
                format!(
                    "'{name}' has no fleet listener this side could call (it joined without --fleet-bind): its link cannot be measured"
                ),
            )
        })?;
        let within = plan.bulk_time_cap * 4 + Duration::from_secs(10);
        let measuring = async {
            let mut sender =
                crate::dial::open::<Empty<Bytes>>(self.identity(), &address, peer.fingerprint)
                    .await?;
            measure(&mut sender, plan)
                .await
                .map_err(|why| FleetError::new(FleetErrorKind::Unreachable, why))
        };
        tokio::time::timeout(within, measuring).await.map_err(|_| {
            FleetError::new(
                FleetErrorKind::Unreachable,
                format!(
                    "measuring the link to '{name}' at {address} took over {} s: the link is down or far too slow",
                    within.as_secs()
                ),
            )
        })?
    }
}

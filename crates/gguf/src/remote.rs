//! Reading GGUF headers over HTTP Range requests, so the planner can size a 400 GB model
//! before downloading it.
//!
//! The header is fetched in growing chunks: 2 MiB first (what the Hugging Face JS library
//! starts with), then at least double the previous request, or more where the reader can tell
//! from a half-read tokenizer array how much is left. A typical header takes one request, one
//! with a 250k-token vocabulary two. Split models are expanded by their file-name pattern
//! (`…-00001-of-00006.gguf`) and each part's header read the same way.
//!
//! The byte source is the small [`RangeSource`] trait; [`HttpSource`] implements it over
//! reqwest and counts its requests. A server that ignores `Range` and starts sending the whole
//! file is cut off at once, with an error saying so.

use crate::error::{ErrorKind, GgufError};
use crate::read::{GgufFile, ReadOptions, DEFAULT_MAX_HEADER_BYTES};
use crate::split::{GgufModel, SplitName};
use std::future::Future;

/// Size of the first request.
pub const FIRST_REQUEST_BYTES: u64 = 2 << 20;
/// Extra bytes requested beyond the reader's estimate of the header's end.
const ESTIMATE_SLACK: u64 = 256 << 10;

/// Bytes of a range read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeBytes {
    /// The bytes: as many as asked for, fewer only at the end of the file.
    pub bytes: Vec<u8>,
    /// The total size of the file, when the source knows it.
    pub total_size: Option<u64>,
}

/// Something that serves byte ranges of one file.
pub trait RangeSource {
    /// The file's name or URL, for messages.
    fn name(&self) -> &str;

    /// Reads up to `len` bytes starting at `start`.
    fn read_range(
        &self,
        start: u64,
        len: u64,
    ) -> impl Future<Output = Result<RangeBytes, GgufError>> + Send;
}

/// Reads a GGUF header from a range source in growing chunks.
pub async fn read_header<S: RangeSource + Sync>(source: &S) -> Result<GgufFile, GgufError> {
    let name = source.name().to_owned();
    let mut buf: Vec<u8> = Vec::new();
    let mut total: Option<u64> = None;
    let mut want = FIRST_REQUEST_BYTES;
    loop {
        let start = buf.len() as u64;
        let len = total
            .map_or(want, |t| want.min(t.saturating_sub(start)))
            .max(1);
        let got = source
            .read_range(start, len)
            .await
            .map_err(|e| e.in_file(&name))?;
        total = total.or(got.total_size);
        let take = got
            .bytes
            .len()
            .min(usize::try_from(len).unwrap_or(usize::MAX));
        buf.extend_from_slice(got.bytes.get(..take).unwrap_or_default());
        // A short read ends the file when its size is unknown; with a known size it may just
        // be a server that caps range lengths, so ask again from there. An empty read ends
        // the file either way, so the loop always makes progress.
        if take == 0 || ((take as u64) < len && total.is_none()) {
            total = Some(total.map_or(buf.len() as u64, |t| t.min(buf.len() as u64)));
        }
        let at_end = total.is_some_and(|t| buf.len() as u64 >= t);
        let options = ReadOptions {
            file_name: Some(name.clone()),
            file_size: total,
            ..ReadOptions::default()
        };
        match GgufFile::read(buf.as_slice(), &options) {
            Ok(file) => return Ok(file),
            Err(GgufError {
                kind:
                    ErrorKind::Truncated {
                        estimated_header_end,
                        ..
                    },
                ..
            }) if !at_end => {
                let have = buf.len() as u64;
                let estimate = estimated_header_end
                    .saturating_sub(have)
                    .saturating_add(ESTIMATE_SLACK);
                want = want
                    .saturating_mul(2)
                    .max(estimate)
                    .min(DEFAULT_MAX_HEADER_BYTES);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The most parts of a split model read over HTTP: each costs at least one request, and the
/// largest published models have a few dozen (GLM-5.2 UD-IQ2_M: 6; 1 TB in 5 GB parts: 200).
pub const MAX_REMOTE_PARTS: u32 = 512;

/// A split model's URL taken apart: `{dir}/{prefix}-0000n-of-0000N.gguf{query}`; a query string
/// (`?download=true`) is kept on every part.
struct SplitUrl<'a> {
    dir: &'a str,
    query: &'a str,
    split: SplitName,
}

impl SplitUrl<'_> {
    fn parse(url: &str) -> Option<SplitUrl<'_>> {
        let (base, query) = url.find(['?', '#']).map_or((url, ""), |i| url.split_at(i));
        let (dir, file) = base.rsplit_once('/')?;
        let split = SplitName::parse(file)?;
        Some(SplitUrl { dir, query, split })
    }

    fn part(&self, number: u32) -> String {
        format!(
            "{}/{}{}",
            self.dir,
            self.split.file_name(number),
            self.query
        )
    }
}

/// Reads a model's headers: all parts if `url` names a part of a split model, else the one
/// file. `open` makes the range source for a URL.
///
/// The first part's `split.count` must agree with the name before any other part is asked
/// for, and no more than [`MAX_REMOTE_PARTS`] are, so a URL cannot make us send thousands of
/// requests.
pub async fn read_model<S, F>(url: &str, open: F) -> Result<GgufModel, GgufError>
where
    S: RangeSource + Sync,
    F: Fn(&str) -> S,
{
    let Some(split) = SplitUrl::parse(url) else {
        return GgufModel::from_shards(vec![read_header(&open(url)).await?]);
    };
    let count = split.split.count;
    if count > MAX_REMOTE_PARTS {
        let kind = ErrorKind::TooManyParts {
            count,
            limit: MAX_REMOTE_PARTS,
        };
        return Err(GgufError::new(kind).in_file(url));
    }
    let mut files = Vec::with_capacity(count as usize);
    for number in 1..=count {
        let file = read_header(&open(&split.part(number))).await?;
        if number == 1 && count > 1 {
            check_promised_count(&file, count)?;
        }
        files.push(file);
    }
    GgufModel::from_shards(files)
}

/// The first part's own `split.count` against the count in its name.
fn check_promised_count(first: &GgufFile, count: u32) -> Result<(), GgufError> {
    let stored = first.metadata.get_u64("split.count");
    if stored == Some(u64::from(count)) {
        return Ok(());
    }
    let said = stored.map_or("no split.count".to_owned(), |n| format!("split.count {n}"));
    let detail = format!("its name promises {count} parts, but its header says {said}");
    let name = first.file_name.clone().unwrap_or_default();
    Err(GgufError::new(ErrorKind::SplitMismatch { detail }).in_file(&name))
}

#[cfg(feature = "remote")]
pub use http::{HttpReader, HttpSource, Limits};

#[cfg(feature = "remote")]
mod http {
    use super::{RangeBytes, RangeSource, FIRST_REQUEST_BYTES};
    use crate::error::{ErrorKind, GgufError};
    use crate::read::GgufFile;
    use crate::split::GgufModel;
    use reqwest::header::{HeaderMap, CONTENT_RANGE, RANGE};
    use std::future::Future;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// How long and how much a remote read may take. Every outbound request has them, so a
    /// server that never answers, trickles bytes, or sends forever is cut off with an error
    /// that says which.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Limits {
        /// To open the connection.
        pub connect: Duration,
        /// Without a single byte arriving.
        pub idle: Duration,
        /// A request may take this long, plus `len / min_bytes_per_s`: a 2 MiB request at the
        /// default floor of 256 KiB/s gets 38 s, whatever the server's pace.
        pub request_base: Duration,
        /// The slowest transfer rate a request is allowed to average.
        pub min_bytes_per_s: u64,
        /// Bytes over all requests of one reader (all parts of a model).
        pub budget_bytes: u64,
    }

    impl Default for Limits {
        fn default() -> Self {
            Limits {
                connect: Duration::from_secs(10),
                idle: Duration::from_secs(30),
                request_base: Duration::from_secs(30),
                min_bytes_per_s: 256 << 10,
                budget_bytes: 1 << 30,
            }
        }
    }

    impl Limits {
        fn request_deadline(&self, len: u64) -> Duration {
            let transfer = len / self.min_bytes_per_s.max(1);
            self.request_base
                .saturating_add(Duration::from_secs(transfer))
        }
    }

    /// Reads headers over HTTP and counts the requests it makes.
    #[derive(Clone, Debug)]
    pub struct HttpReader {
        client: reqwest::Client,
        limits: Limits,
        requests: Arc<AtomicU64>,
        /// Bytes the reader may still receive.
        budget: Arc<AtomicU64>,
    }

    impl Default for HttpReader {
        fn default() -> Self {
            HttpReader::with_limits(Limits::default())
        }
    }

    impl HttpReader {
        /// A reader with the default [`Limits`] (which speaks https:// only if a reqwest TLS
        /// feature is enabled somewhere in the build).
        pub fn new() -> Self {
            HttpReader::default()
        }

        /// A reader with these limits.
        pub fn with_limits(limits: Limits) -> Self {
            let client = reqwest::Client::builder()
                .connect_timeout(limits.connect)
                .read_timeout(limits.idle)
                .build()
                .unwrap_or_default();
            HttpReader::with_client(client, limits)
        }

        /// A reader over a configured client (proxy, an access token header); the client's own
        /// timeouts apply besides `limits`' request deadline and byte budget.
        pub fn with_client(client: reqwest::Client, limits: Limits) -> Self {
            HttpReader {
                client,
                limits,
                requests: Arc::default(),
                budget: Arc::new(AtomicU64::new(limits.budget_bytes)),
            }
        }

        /// HTTP requests made so far by this reader and its sources.
        pub fn requests(&self) -> u64 {
            self.requests.load(Ordering::Relaxed)
        }

        /// A range source for one URL, counting into this reader.
        pub fn source(&self, url: &str) -> HttpSource {
            HttpSource {
                client: self.client.clone(),
                url: url.to_owned(),
                limits: self.limits,
                requests: Arc::clone(&self.requests),
                budget: Arc::clone(&self.budget),
            }
        }

        /// Reads one file's header.
        pub async fn read_header(&self, url: &str) -> Result<GgufFile, GgufError> {
            super::read_header(&self.source(url)).await
        }

        /// Reads a model's headers, all parts of a split model.
        pub async fn read_model(&self, url: &str) -> Result<GgufModel, GgufError> {
            super::read_model(url, |u| self.source(u)).await
        }
    }

    /// One URL as a range source.
    #[derive(Clone, Debug)]
    pub struct HttpSource {
        client: reqwest::Client,
        url: String,
        limits: Limits,
        requests: Arc<AtomicU64>,
        budget: Arc<AtomicU64>,
    }

    impl RangeSource for HttpSource {
        fn name(&self) -> &str {
            &self.url
        }

        fn read_range(
            &self,
            start: u64,
            len: u64,
        ) -> impl Future<Output = Result<RangeBytes, GgufError>> + Send {
            self.fetch(start, len)
        }
    }

    impl HttpSource {
        /// One range request under the request deadline and the reader's byte budget.
        async fn fetch(&self, start: u64, len: u64) -> Result<RangeBytes, GgufError> {
            // All or nothing: a request cut short by the budget would read as the file's end.
            let left = self.budget.load(Ordering::Relaxed);
            if len > left {
                return Err(self.fail(ErrorKind::ByteBudgetExceeded {
                    budget: self.limits.budget_bytes,
                }));
            }
            let deadline = self.limits.request_deadline(len);
            let got = tokio::time::timeout(deadline, self.fetch_unbounded(start, len))
                .await
                .map_err(|_| {
                    self.fail(ErrorKind::Network {
                        message: format!(
                            "the server sent too little in {} s (a request of {len} bytes must \
                             average at least {} KiB/s)",
                            deadline.as_secs(),
                            self.limits.min_bytes_per_s >> 10
                        ),
                    })
                })??;
            let taken = got.bytes.len() as u64;
            self.budget.fetch_sub(taken.min(left), Ordering::Relaxed);
            Ok(got)
        }

        fn fail(&self, kind: ErrorKind) -> GgufError {
            GgufError::new(kind).in_file(&self.url)
        }

        async fn fetch_unbounded(&self, start: u64, len: u64) -> Result<RangeBytes, GgufError> {
            self.requests.fetch_add(1, Ordering::Relaxed);
            let fail = |kind| self.fail(kind);
            let last = start.saturating_add(len.saturating_sub(1));
            let response = self
                .client
                .get(&self.url)
                .header(RANGE, format!("bytes={start}-{last}"))
                .send()
                .await
                .map_err(|e| fail(network(&e)))?;
            let status = response.status().as_u16();
            let total = match status {
                206 => {
                    let (first, total) = content_range(response.headers());
                    if first.is_some_and(|f| f != start) {
                        let message = format!(
                            "the server answered a request for byte {start} with bytes from {}",
                            first.unwrap_or_default()
                        );
                        return Err(fail(ErrorKind::Network { message }));
                    }
                    total
                }
                // A server that ignores Range answers 200 with the whole file. Dropping the
                // response unread closes the connection, so nothing more is downloaded; a body
                // no longer than asked for is harmless and used as it is.
                200 => {
                    let body_len = response.content_length();
                    if start != 0 || body_len.is_none_or(|b| b > len) {
                        return Err(fail(ErrorKind::RangeIgnored {
                            status,
                            start,
                            len,
                            body_len,
                        }));
                    }
                    body_len
                }
                // Asked beyond the end: an empty read, and the size if the server says it.
                416 => {
                    let total = content_range(response.headers()).1;
                    return Ok(RangeBytes {
                        bytes: Vec::new(),
                        total_size: total,
                    });
                }
                _ => return Err(fail(ErrorKind::HttpStatus { status })),
            };
            let bytes = read_capped(response, len)
                .await
                .map_err(|e| fail(network(&e)))?;
            Ok(RangeBytes {
                bytes,
                total_size: total,
            })
        }
    }

    /// The body, but never more than `len` bytes, whatever the server sends.
    async fn read_capped(mut response: reqwest::Response, len: u64) -> reqwest::Result<Vec<u8>> {
        let cap = usize::try_from(len).unwrap_or(usize::MAX);
        let initial = usize::try_from(len.min(FIRST_REQUEST_BYTES)).unwrap_or(0);
        let mut out = Vec::with_capacity(initial);
        while out.len() < cap {
            let Some(chunk) = response.chunk().await? else {
                break;
            };
            let room = cap.saturating_sub(out.len()).min(chunk.len());
            out.extend_from_slice(chunk.get(..room).unwrap_or_default());
        }
        Ok(out)
    }

    /// `Content-Range: bytes <first>-<last>/<total>` → (first, total); `*` is unknown.
    fn content_range(headers: &HeaderMap) -> (Option<u64>, Option<u64>) {
        let Some(value) = headers.get(CONTENT_RANGE).and_then(|v| v.to_str().ok()) else {
            return (None, None);
        };
        let spec = value.trim().strip_prefix("bytes").unwrap_or(value).trim();
        let (range, total) = spec.split_once('/').unwrap_or((spec, "*"));
        let first = range
            .split_once('-')
            .and_then(|(f, _)| f.trim().parse().ok());
        (first, total.trim().parse().ok())
    }

    /// The error and its causes in one line ("error sending request: connection refused").
    fn network(e: &reqwest::Error) -> ErrorKind {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            message = format!("{message}: {cause}");
            source = cause.source();
        }
        ErrorKind::Network { message }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use reqwest::header::HeaderValue;

        #[test]
        fn parses_content_range() {
            let mut h = HeaderMap::new();
            assert_eq!(content_range(&h), (None, None));
            h.insert(
                CONTENT_RANGE,
                HeaderValue::from_static("bytes 0-2097151/400000000000"),
            );
            assert_eq!(content_range(&h), (Some(0), Some(400_000_000_000)));
            h.insert(CONTENT_RANGE, HeaderValue::from_static("bytes 5-9/*"));
            assert_eq!(content_range(&h), (Some(5), None));
            h.insert(CONTENT_RANGE, HeaderValue::from_static("bytes */1234"));
            assert_eq!(content_range(&h), (None, Some(1234)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_split_urls_and_keeps_queries() {
        let split =
            SplitUrl::parse("http://h/org/repo/resolve/main/M-Q2-00003-of-00004.gguf?download=1")
                .unwrap();
        assert_eq!(split.split.count, 4);
        assert_eq!(
            split.part(1),
            "http://h/org/repo/resolve/main/M-Q2-00001-of-00004.gguf?download=1"
        );
        assert!(SplitUrl::parse("http://h/m.gguf").is_none());
    }
}

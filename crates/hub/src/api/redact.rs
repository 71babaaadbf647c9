//! Addresses as messages, logs, stored rows and the UI may show them: without their query
//! string, where a CDN's signed address carries temporary credentials (`X-Amz-Signature`,
//! `Expires`, `Key-Pair-Id`), and without a fragment.

use url::Url;

/// `url` without its query and fragment.
pub fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// `text` with the query cut from every http(s) address in it: for messages written by other
/// code (an HTTP library's error names the address it failed on, signed query and all).
pub fn without_url_queries(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = next_address(rest) {
        let (before, address) = rest.split_at(start);
        out.push_str(before);
        let end = address
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ','))
            .unwrap_or(address.len());
        let (address, after) = address.split_at(end);
        out.push_str(address.split(['?', '#']).next().unwrap_or_default());
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Where the next `http://` or `https://` address starts.
fn next_address(text: &str) -> Option<usize> {
    match (text.find("http://"), text.find("https://")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_address_loses_its_query() {
        let url = Url::parse("https://cdn.example/repos/ab/cd?X-Amz-Signature=s3cr3t&Expires=1#x")
            .expect("url");
        assert_eq!(shown_url(&url), "https://cdn.example/repos/ab/cd");
    }

    #[test]
    fn addresses_in_a_text_lose_their_queries_and_the_rest_stays() {
        let text =
            "error sending request for url (https://cdn.example/a?X-Amz-Signature=s3cr3t&k=1): \
                    connection refused; see http://hub.local/o/n?cursor=2 and https://plain/x";
        assert_eq!(
            without_url_queries(text),
            "error sending request for url (https://cdn.example/a): connection refused; see \
             http://hub.local/o/n and https://plain/x"
        );
        assert_eq!(without_url_queries("no address"), "no address");
    }
}

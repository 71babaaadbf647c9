//! The language WebKit should report to pages when the C library's locale names none.

/// What pages get when the locale is `C`, `C.UTF-8` or `POSIX`, which carry no language.
const FALLBACK: &str = "en-US";

/// `Some("en-US")` when this process's `LC_CTYPE` locale (what WebKitGTK turns into
/// `navigator.language`) does not start with a language code; `None` when WebKit's own choice is fine.
#[cfg(target_os = "linux")]
pub fn fallback_language() -> Option<&'static str> {
    // SAFETY: a query (NULL locale) only returns the current name; GTK has already called
    // setlocale(LC_ALL, "") on this (the main) thread, and nothing else changes the locale.
    let current = unsafe {
        let name = libc::setlocale(libc::LC_CTYPE, std::ptr::null());
        if name.is_null() {
            return Some(FALLBACK);
        }
        std::ffi::CStr::from_ptr(name)
            .to_string_lossy()
            .into_owned()
    };
    needs_fallback(&current).then_some(FALLBACK)
}

/// WebKit keeps what comes before the first `.` and `@` and swaps `_` for `-`; the result must
/// start with a 2–3 letter ISO 639 code for `Intl` to accept it.
fn needs_fallback(locale_name: &str) -> bool {
    let language = locale_name
        .split(['.', '@', '_', '-'])
        .next()
        .unwrap_or_default();
    let is_iso639 =
        (2..=3).contains(&language.len()) && language.bytes().all(|b| b.is_ascii_alphabetic());
    !is_iso639
}

#[cfg(test)]
mod tests {
    use super::needs_fallback;

    #[test]
    fn c_and_posix_locales_get_a_fallback() {
        for name in ["C", "C.UTF-8", "C.utf8", "POSIX", ""] {
            assert!(needs_fallback(name), "{name:?}");
        }
    }

    #[test]
    fn real_locales_are_left_alone() {
        for name in [
            "en_US.UTF-8",
            "de_DE.utf8",
            "fr_FR",
            "sr_RS@latin",
            "ast_ES.UTF-8",
            "ja",
        ] {
            assert!(!needs_fallback(name), "{name:?}");
        }
    }
}

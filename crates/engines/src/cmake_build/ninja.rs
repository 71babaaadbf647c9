//! Reading Ninja: its `[N/M]` progress prefix and its target list.

use std::collections::HashSet;

/// Ninja's `[N/M]` status prefix as a fraction (Rigdeck sets `NINJA_STATUS` to that form).
pub fn parse_ninja_progress(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (inside, _) = rest.split_once(']')?;
    let (done, total) = inside.split_once('/')?;
    let done = done.trim().parse().ok()?;
    let total: u64 = total.trim().parse().ok()?;
    (total > 0 && done <= total).then_some((done, total))
}

/// The target names in the output of `ninja -t targets all` (`name: rule`, one a line).
pub fn parse_target_list(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|line| line.trim().split_once(": "))
        .map(|(name, _)| name.trim().to_owned())
        .filter(|name| !name.is_empty() && !name.contains(' '))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ninja_status_lines_become_fractions() {
        assert_eq!(
            parse_ninja_progress(
                "[12/240] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"
            ),
            Some((12, 240))
        );
        assert_eq!(
            parse_ninja_progress("[240/240] Linking CXX executable bin/llama-server"),
            Some((240, 240))
        );
        assert_eq!(parse_ninja_progress("-- Configuring done"), None);
        assert_eq!(parse_ninja_progress("[3/0] nonsense"), None);
        assert_eq!(parse_ninja_progress("[warning] something"), None);
    }

    #[test]
    fn ninja_target_lists_are_parsed() {
        let text =
            "bin/llama-server: CXX_EXECUTABLE_LINKER__llama-server_Release\nedit_cache: phony\n\
                    llama-server: phony\nllama-bench: phony\ntools/server/install: phony\n";
        let targets = parse_target_list(text);
        assert!(targets.contains("llama-server") && targets.contains("llama-bench"));
        assert!(targets.contains("bin/llama-server"));
        assert!(!targets.contains("llama-fit-params"));
    }
}

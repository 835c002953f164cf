//! Words for a shell on a lab host. (The `Remote` trait that stood here had one
//! implementation, the namespace host, once an unwired SSH one was deleted in issue 39; its
//! methods are `NsHost`'s own since issue 54. A second machine would come back as a typed
//! remote interface, not as netsteer command lines.)

/// A word quoted for a POSIX shell: inside single quotes everything is literal except the
/// quote itself, written as `'\''`.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn words_survive_a_shell() {
        assert_eq!(shell_quote("iperf3"), "iperf3");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME;rm"), "'$HOME;rm'");
        // What a POSIX shell makes of the quoted words is the original words.
        let words = [
            "a b",
            "it's",
            "",
            "$HOME",
            "\"q\"",
            "back\\slash",
            "new\nline",
        ];
        let line = std::iter::once("printf '%s|'".to_string())
            .chain(words.iter().map(|w| shell_quote(w)))
            .collect::<Vec<_>>()
            .join(" ");
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{}|", words.join("|"))
        );
    }
}

//! `capgate keys hash`: the SHA-256 form of an API key that `[[gateway.apiKeys]] sha256`
//! stores, read from standard input (never the command line).

use std::process::ExitCode;

/// API key helpers.
#[derive(clap::Args, Debug)]
pub struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(clap::Subcommand, Debug)]
enum KeysCommand {
    /// Print the SHA-256 of an API key, the form `[[gateway.apiKeys]] sha256` stores. The
    /// key is read from standard input (one line; the line break is not part of it), never
    /// from the command line, where shell history and process listings would keep it.
    ///
    /// Example: printf '%s' "$NEW_KEY" | capgate keys hash
    Hash {
        /// Refused: a key on the command line is visible to every local user (`ps`) and
        /// kept in shell history. Pipe it on standard input instead.
        #[arg(hide = true)]
        key: Option<String>,
    },
}

/// `capgate keys hash`: 0 with the hash printed, 2 when the key came on the command line
/// or standard input held no usable key.
pub fn run(args: KeysArgs) -> anyhow::Result<ExitCode> {
    let KeysCommand::Hash { key } = args.command;
    if key.is_some() {
        eprintln!(
            "error: `capgate keys hash` reads the key from standard input, not the command line \
             (where `ps` and shell history would show it): printf '%s' \"$KEY\" | capgate keys hash"
        );
        return Ok(ExitCode::from(2));
    }
    let key = match read_key(std::io::stdin().lock()) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    // The very function the gateway hashes a presented key with.
    println!("{}", capgate_gateway::auth::hash_api_key(&key));
    Ok(ExitCode::SUCCESS)
}

/// The longest API key `capgate keys hash` reads (a key is a few dozen characters; this
/// bounds a mistaken pipe of a whole file).
pub const MAX_KEY_BYTES: usize = 4096;

/// Why `capgate keys hash` could not read a key from standard input.
#[derive(Debug, thiserror::Error)]
pub enum KeyInputError {
    /// Standard input could not be read.
    #[error("cannot read the key from standard input: {0}")]
    Io(#[from] std::io::Error),
    /// Nothing but a line break (or nothing at all) arrived.
    #[error("no key on standard input: pipe it in, e.g. printf '%s' \"$KEY\" | capgate keys hash")]
    Empty,
    /// More than one line: a key is one line.
    #[error("the key must be one line (standard input held more than one)")]
    MultiLine,
    /// Longer than [`MAX_KEY_BYTES`].
    #[error("the key is longer than {MAX_KEY_BYTES} bytes")]
    TooLong,
    /// Not UTF-8.
    #[error("the key is not UTF-8 text")]
    NotUtf8,
}

/// The key of `capgate keys hash`, from standard input: one line, its line break (`\n` or
/// `\r\n`) not part of it, at most [`MAX_KEY_BYTES`]. Keys never come from the command line,
/// where process listings and shell history would keep them.
pub fn read_key(input: impl std::io::Read) -> Result<String, KeyInputError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let limit = u64::try_from(MAX_KEY_BYTES + 3).unwrap_or(u64::MAX);
    input.take(limit).read_to_end(&mut bytes)?;
    let text = String::from_utf8(bytes).map_err(|_| KeyInputError::NotUtf8)?;
    let line = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |l| l.strip_suffix('\r').unwrap_or(l));
    if line.contains(['\n', '\r']) {
        return Err(KeyInputError::MultiLine);
    }
    if line.len() > MAX_KEY_BYTES {
        return Err(KeyInputError::TooLong);
    }
    if line.is_empty() {
        return Err(KeyInputError::Empty);
    }
    Ok(line.to_string())
}

#[cfg(test)]
mod key_input_tests {
    use super::*;

    #[test]
    fn one_line_is_the_key_and_its_line_break_is_not() {
        assert_eq!(read_key(&b"k1"[..]).unwrap(), "k1");
        assert_eq!(read_key(&b"k1\n"[..]).unwrap(), "k1");
        assert_eq!(read_key(&b"k1\r\n"[..]).unwrap(), "k1");
        assert_eq!(read_key(&b" k 1 "[..]).unwrap(), " k 1 ");
    }

    #[test]
    fn empty_multi_line_long_and_binary_input_is_refused() {
        assert!(matches!(read_key(&b""[..]), Err(KeyInputError::Empty)));
        assert!(matches!(read_key(&b"\n"[..]), Err(KeyInputError::Empty)));
        assert!(matches!(
            read_key(&b"a\nb"[..]),
            Err(KeyInputError::MultiLine)
        ));
        assert!(matches!(
            read_key(&b"a\n\n"[..]),
            Err(KeyInputError::MultiLine)
        ));
        let long = vec![b'k'; MAX_KEY_BYTES + 1];
        assert!(matches!(read_key(&long[..]), Err(KeyInputError::TooLong)));
        let huge = vec![b'k'; MAX_KEY_BYTES * 4];
        assert!(matches!(read_key(&huge[..]), Err(KeyInputError::TooLong)));
        assert!(matches!(
            read_key(&[0xff, 0xfe][..]),
            Err(KeyInputError::NotUtf8)
        ));
    }
}

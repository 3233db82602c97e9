//! One line for an error and its causes. Error types here show only their own context in
//! `Display` and hand the cause over as `source`, so whoever prints an error prints the
//! chain once — through this adapter, or `anyhow`'s `{:#}` in the binaries' `main`.

use std::{error::Error, fmt};

/// Displays `error: cause: root cause`, each message once.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            write!(formatter, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigError;

    #[test]
    fn each_cause_is_printed_once() {
        let parse = serde_json::from_str::<serde_json::Value>("{ not json").unwrap_err();
        let error = ConfigError::Parse(parse);
        assert_eq!(
            ErrorChain(&error).to_string(),
            "failed to parse bot config: key must be a string at line 1 column 3"
        );
    }
}

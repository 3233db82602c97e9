//! Approval buttons: the two answers an approval request offers where the platform has
//! buttons, what each button carries, and how a press reads back. Pure.
//!
//! A button carries only its decision and the request's code (`approve:K7QX2P`), never
//! the call's arguments: the stored request is what runs. A press reads back into the
//! very text the presser could have typed (`approve K7QX2P`) and is answered by the
//! same decision as that text, from the presser's own platform identity; a value no
//! button of ours carries reads back to nothing and is dropped.

/// Longest code a button carries (the agent's codes are six characters).
const MAX_CODE_CHARS: usize = 16;

/// The answer a button gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

impl Decision {
    /// The verb typed to give this answer.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }

    /// The button's label (short enough for every platform: WhatsApp allows 20).
    pub fn label(self) -> &'static str {
        match self {
            Self::Approve => "Approve",
            Self::Reject => "Reject",
        }
    }

    fn from_verb(verb: &str) -> Option<Self> {
        match verb {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }
}

/// One button under an approval request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Button {
    pub decision: Decision,
    /// What the press sends back: `approve:K7QX2P` (at most 24 bytes, inside every
    /// platform's limit: Telegram's `callback_data` takes 64).
    pub value: String,
}

impl Button {
    /// The label shown on it.
    pub fn label(&self) -> &'static str {
        self.decision.label()
    }
}

/// The buttons of request `code`: Approve, then Reject.
pub fn buttons(code: &str) -> [Button; 2] {
    [Decision::Approve, Decision::Reject].map(|decision| Button {
        decision,
        value: format!("{}:{code}", decision.verb()),
    })
}

/// The answer a pressed button's `value` stands for, as the presser would have typed it
/// (`approve K7QX2P`); `None` for a value none of our buttons carries (forged, or some
/// other app's).
pub fn pressed_text(value: &str) -> Option<String> {
    let (verb, code) = value.split_once(':')?;
    let decision = Decision::from_verb(verb)?;
    let well_formed = !code.is_empty()
        && code.len() <= MAX_CODE_CHARS
        && code
            .bytes()
            .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit());
    well_formed.then(|| format!("{} {code}", decision.verb()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_button_reads_back_as_the_answer_it_stands_for() {
        let [approve, reject] = buttons("K7QX2P");
        assert_eq!(
            (approve.value.as_str(), approve.label()),
            ("approve:K7QX2P", "Approve")
        );
        assert_eq!(
            (reject.value.as_str(), reject.label()),
            ("reject:K7QX2P", "Reject")
        );
        assert_eq!(
            pressed_text(&approve.value).as_deref(),
            Some("approve K7QX2P")
        );
        assert_eq!(
            pressed_text(&reject.value).as_deref(),
            Some("reject K7QX2P")
        );
    }

    #[test]
    fn a_value_no_button_carries_reads_back_to_nothing() {
        for forged in [
            "",
            "approve",
            "approve:",
            "approve K7QX2P",
            "delete:K7QX2P",
            "approve:k7qx2p",
            "approve:K7QX2P extra",
            "approve:K7QX2P:{\"to\":\"marko\"}",
            "approve:AAAAAAAAAAAAAAAAAAAAA",
            "ignore previous instructions",
        ] {
            assert_eq!(pressed_text(forged), None, "{forged:?}");
        }
    }
}

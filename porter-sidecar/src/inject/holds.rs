//! Requests held for an approval, and the one-time grants that let an approved one
//! through. Both travel with a command's key: the agent names, when it registers the
//! key, which requests of the caller's role wait for someone else's yes (`hold`) and
//! which ones an approver already said yes to (`grants`). A request the role's policy
//! admitted and a hold matches is refused and remembered under the key — unless a
//! grant of that key names exactly its host, method and path, which admits it once.
//!
//! A hold is a refusal, so everything an upstream may read as the same request must
//! match it: methods in any case, paths percent-decoded, without `;` parameters or a
//! trailing `/`, compared without regard to case. A grant is an admission, so it is
//! compared exactly with the path as Porter reported it held.
//!
//! Pure but for the key's own memory: compiled at register time, asked per request.

use porter_protocol::{
    control::{HeldRequest, RequestGrant, RequestHold},
    registry::split_host,
};

use super::request_policy::PathPattern;
use parking_lot::Mutex;

/// Why a key's holds or grants were refused; each variant names the hold and field.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error("hold[{index}]: a hold needs hosts, methods and paths")]
    Incomplete { index: usize },
    #[error("hold[{index}].hosts: {host:?} is not a host name[:port]")]
    Host { index: usize, host: String },
    #[error("hold[{index}].paths: {path:?} must start with /")]
    RelativePath { index: usize, path: String },
    #[error("hold[{index}].paths: path {path:?}")]
    Path {
        index: usize,
        path: String,
        #[source]
        source: globset::Error,
    },
    #[error("a key carries at most {MOST_GRANTS} grants")]
    TooManyGrants,
}

/// Requests remembered per key at most (a loop of held requests remembers the first).
const MOST_HELD: usize = 16;

/// Grants one key may carry.
pub const MOST_GRANTS: usize = 16;

/// A key's holds, compiled.
#[derive(Debug, Default)]
pub struct Holds {
    rules: Vec<Hold>,
}

#[derive(Debug)]
struct Hold {
    /// `None`: any host.
    hosts: Option<Vec<(String, u16)>>,
    /// Upper case; `None`: any method.
    methods: Option<Vec<String>>,
    paths: Vec<PathPattern>,
}

impl Holds {
    /// Compiles the holds of a register request; errors name the entry and field.
    pub fn compile(holds: &[RequestHold]) -> Result<Self, HoldError> {
        let mut rules = Vec::with_capacity(holds.len());
        for (index, hold) in holds.iter().enumerate() {
            if hold.hosts.is_empty() || hold.methods.is_empty() || hold.paths.is_empty() {
                return Err(HoldError::Incomplete { index });
            }
            let hosts = if hold.hosts.iter().any(|host| host == "*") {
                None
            } else {
                Some(
                    hold.hosts
                        .iter()
                        .map(|host| {
                            split_host(host).ok_or_else(|| HoldError::Host {
                                index,
                                host: host.clone(),
                            })
                        })
                        .collect::<Result<_, _>>()?,
                )
            };
            let methods = if hold.methods.iter().any(|method| method == "*") {
                None
            } else {
                Some(
                    hold.methods
                        .iter()
                        .map(|method| method.to_ascii_uppercase())
                        .collect(),
                )
            };
            let paths = hold
                .paths
                .iter()
                .map(|path| {
                    if !path.starts_with('/') {
                        return Err(HoldError::RelativePath {
                            index,
                            path: path.clone(),
                        });
                    }
                    PathPattern::new(path, true).map_err(|source| HoldError::Path {
                        index,
                        path: path.clone(),
                        source,
                    })
                })
                .collect::<Result<_, _>>()?;
            rules.push(Hold {
                hosts,
                methods,
                paths,
            });
        }
        Ok(Self { rules })
    }

    /// The first hold matching a request, with the path as holds read it; `None` when
    /// no hold matches. A path that does not decode matches every hold of its host and
    /// method (it fails closed).
    pub fn matching(
        &self,
        host: &str,
        port: u16,
        method: &str,
        path: &str,
    ) -> Option<(usize, String)> {
        let method = method.to_ascii_uppercase();
        let normalised = normalise_path(path);
        self.rules.iter().enumerate().find_map(|(index, hold)| {
            let host_matches = hold.hosts.as_ref().is_none_or(|hosts| {
                hosts
                    .iter()
                    .any(|(name, allowed_port)| name == host && *allowed_port == port)
            });
            let method_matches = hold
                .methods
                .as_ref()
                .is_none_or(|methods| methods.contains(&method));
            if !host_matches || !method_matches {
                return None;
            }
            match &normalised {
                Some(normalised) => hold
                    .paths
                    .iter()
                    .any(|pattern| pattern.matches(normalised))
                    .then(|| (index, normalised.clone())),
                None => Some((index, path.to_owned())),
            }
        })
    }
}

/// The path as a hold reads it: percent-decoded, each segment without `;` parameters,
/// no trailing `/`. `None` when it does not decode to text.
pub fn normalise_path(path: &str) -> Option<String> {
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .ok()?;
    let mut normalised = String::with_capacity(decoded.len());
    for segment in decoded.split('/').skip(1) {
        normalised.push('/');
        normalised.push_str(segment.split(';').next().unwrap_or_default());
    }
    while normalised.len() > 1 && normalised.ends_with('/') {
        normalised.pop();
    }
    if normalised.is_empty() {
        normalised.push('/');
    }
    Some(normalised)
}

/// `name`, or `name:port` when the port is not 443: how held requests and grants name
/// a host.
pub fn host_label(host: &str, port: u16) -> String {
    if port == 443 {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    }
}

/// What the holds and grants of a key decide about one request the role's policy
/// admitted.
#[derive(Debug, PartialEq, Eq)]
pub enum HoldDecision {
    /// No hold matches: the request goes on.
    Free,
    /// A hold matches and a grant named exactly this request: it goes on, once.
    Granted { approval: String },
    /// A hold matches and no grant covers it: refused, remembered.
    Held(HeldRequest),
}

/// One key's holds, grants and held requests.
#[derive(Debug, Default)]
pub struct KeyApprovals {
    holds: Holds,
    grants: Mutex<Vec<RequestGrant>>,
    held: Mutex<Vec<HeldRequest>>,
}

impl KeyApprovals {
    /// Compiles a register request's holds and takes its grants (methods upper-cased).
    pub fn new(holds: &[RequestHold], grants: Vec<RequestGrant>) -> Result<Self, HoldError> {
        if grants.len() > MOST_GRANTS {
            return Err(HoldError::TooManyGrants);
        }
        let grants = grants
            .into_iter()
            .map(|grant| RequestGrant {
                method: grant.method.to_ascii_uppercase(),
                ..grant
            })
            .collect();
        Ok(Self {
            holds: Holds::compile(holds)?,
            grants: Mutex::new(grants),
            held: Mutex::new(Vec::new()),
        })
    }

    /// Decides a request to `host:port` of credential `cli`; consumes the grant that
    /// admits it, remembers it when it is held.
    pub fn decide(
        &self,
        cli: &str,
        host: &str,
        port: u16,
        method: &str,
        path: &str,
    ) -> HoldDecision {
        let Some((hold, normalised)) = self.holds.matching(host, port, method, path) else {
            return HoldDecision::Free;
        };
        let held = HeldRequest {
            hold,
            cli: cli.to_owned(),
            host: host_label(host, port),
            method: method.to_ascii_uppercase(),
            path: normalised,
        };
        {
            let mut grants = self.grants.lock();
            let granted = grants.iter().position(|grant| {
                grant.host == held.host && grant.method == held.method && grant.path == held.path
            });
            // Used once: a second matching request under the same key is held again.
            if let Some(index) = granted {
                let grant = grants.remove(index);
                return HoldDecision::Granted {
                    approval: grant.approval,
                };
            }
        }
        let mut remembered = self.held.lock();
        if remembered.len() < MOST_HELD && !remembered.contains(&held) {
            remembered.push(held.clone());
        }
        HoldDecision::Held(held)
    }

    /// The requests held so far, taken (the key's command has ended).
    pub fn take_held(&self) -> Vec<HeldRequest> {
        std::mem::take(&mut *self.held.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merge_hold() -> RequestHold {
        RequestHold {
            hosts: vec!["api.github.com".into()],
            methods: vec!["PUT".into(), "POST".into()],
            paths: vec!["/repos/*/*/pulls/*/merge".into()],
        }
    }

    fn grant(method: &str, path: &str) -> RequestGrant {
        RequestGrant {
            approval: "K7QX2P".into(),
            host: "api.github.com".into(),
            method: method.into(),
            path: path.into(),
        }
    }

    fn decide(approvals: &KeyApprovals, method: &str, path: &str) -> HoldDecision {
        approvals.decide("gh", "api.github.com", 443, method, path)
    }

    #[test]
    fn a_matching_request_is_held_and_remembered_once() {
        let approvals = KeyApprovals::new(&[merge_hold()], Vec::new()).unwrap();
        let HoldDecision::Held(held) = decide(&approvals, "PUT", "/repos/o/r/pulls/1/merge") else {
            panic!("a merge is held");
        };
        assert_eq!(
            (
                held.hold,
                held.cli.as_str(),
                held.host.as_str(),
                held.method.as_str()
            ),
            (0, "gh", "api.github.com", "PUT")
        );
        assert!(matches!(
            decide(&approvals, "PUT", "/repos/o/r/pulls/1/merge"),
            HoldDecision::Held(_)
        ));
        assert_eq!(
            decide(&approvals, "GET", "/repos/o/r/pulls/1/merge"),
            HoldDecision::Free
        );
        assert_eq!(
            decide(&approvals, "PUT", "/repos/o/r/pulls/1"),
            HoldDecision::Free
        );
        assert_eq!(
            approvals.decide(
                "gh",
                "uploads.github.com",
                443,
                "PUT",
                "/repos/o/r/pulls/1/merge"
            ),
            HoldDecision::Free
        );
        assert_eq!(approvals.take_held(), [held]);
        assert!(approvals.take_held().is_empty());
    }

    #[test]
    fn encodings_case_parameters_and_trailing_slashes_are_held_the_same() {
        let approvals = KeyApprovals::new(&[merge_hold()], Vec::new()).unwrap();
        for (method, path) in [
            ("put", "/repos/o/r/pulls/1/merge"),
            ("Put", "/repos/o/r/pulls/1/merge"),
            ("PUT", "/repos/o/r/pulls/1/merge/"),
            ("PUT", "/repos/o/r/pulls/1/merge//"),
            ("PUT", "/repos/o/r/pulls/1/m%65rge"),
            ("PUT", "/repos/o/r/pulls/1/%6D%65%72%67%65"),
            ("PUT", "/repos/o/r/PULLS/1/MERGE"),
            ("PUT", "/repos/o/r/pulls/1/merge;x=1"),
            ("PUT", "/repos/o/r/pulls;a/1/merge"),
            ("PUT", "/repos/o/r/pulls/1/merge%ff"),
        ] {
            assert!(
                matches!(decide(&approvals, method, path), HoldDecision::Held(_)),
                "{method} {path}"
            );
        }
        assert_eq!(
            normalise_path("/repos/o/r/pulls/1/m%65rge;x/").as_deref(),
            Some("/repos/o/r/pulls/1/merge")
        );
        assert_eq!(normalise_path("/").as_deref(), Some("/"));
        assert_eq!(normalise_path("/%ff"), None);
    }

    #[test]
    fn a_grant_admits_exactly_its_request_once() {
        let approvals = KeyApprovals::new(
            &[merge_hold()],
            vec![grant("put", "/repos/o/r/pulls/1/merge")],
        )
        .unwrap();
        // Another pull request, another method: not this grant's.
        assert!(matches!(
            decide(&approvals, "PUT", "/repos/o/r/pulls/2/merge"),
            HoldDecision::Held(_)
        ));
        assert!(matches!(
            decide(&approvals, "POST", "/repos/o/r/pulls/1/merge"),
            HoldDecision::Held(_)
        ));
        assert_eq!(
            decide(&approvals, "PUT", "/repos/o/r/pulls/1/merge"),
            HoldDecision::Granted {
                approval: "K7QX2P".into()
            }
        );
        assert!(
            matches!(
                decide(&approvals, "PUT", "/repos/o/r/pulls/1/merge"),
                HoldDecision::Held(_)
            ),
            "a grant is used once"
        );
        // A grant is the key's own: another key with the same holds has none.
        let other = KeyApprovals::new(&[merge_hold()], Vec::new()).unwrap();
        assert!(matches!(
            decide(&other, "PUT", "/repos/o/r/pulls/1/merge"),
            HoldDecision::Held(_)
        ));
    }

    #[test]
    fn a_grant_for_a_port_or_host_covers_only_that_one() {
        let hold = RequestHold {
            hosts: vec!["*".into()],
            methods: vec!["*".into()],
            paths: vec!["/admin/**".into()],
        };
        let approvals = KeyApprovals::new(
            &[hold],
            vec![RequestGrant {
                approval: "ABCDEF".into(),
                host: "git.example:8443".into(),
                method: "DELETE".into(),
                path: "/admin/users/7".into(),
            }],
        )
        .unwrap();
        assert!(matches!(
            approvals.decide("git", "git.example", 443, "DELETE", "/admin/users/7"),
            HoldDecision::Held(_)
        ));
        assert_eq!(
            approvals.decide("git", "git.example", 8443, "delete", "/admin/users/7/"),
            HoldDecision::Granted {
                approval: "ABCDEF".into()
            }
        );
        assert!(matches!(
            approvals.decide("git", "git.example", 8443, "GET", "/admin"),
            HoldDecision::Held(_)
        ));
    }

    #[test]
    fn bad_holds_are_refused_naming_the_field() {
        let bad = |hold: RequestHold| KeyApprovals::new(&[hold], Vec::new()).unwrap_err();
        let host = bad(RequestHold {
            hosts: vec!["a b".into()],
            ..merge_hold()
        });
        assert_eq!(
            host.to_string(),
            "hold[0].hosts: \"a b\" is not a host name[:port]"
        );
        assert!(matches!(
            bad(RequestHold {
                paths: vec!["repos".into()],
                ..merge_hold()
            }),
            HoldError::RelativePath { index: 0, .. }
        ));
        let pattern = bad(RequestHold {
            paths: vec!["/repos/[o".into()],
            ..merge_hold()
        });
        assert!(matches!(pattern, HoldError::Path { index: 0, .. }));
        assert!(pattern.to_string().starts_with("hold[0].paths"));
        assert!(matches!(
            bad(RequestHold {
                methods: Vec::new(),
                ..merge_hold()
            }),
            HoldError::Incomplete { index: 0 }
        ));
        let many = vec![grant("PUT", "/x"); MOST_GRANTS + 1];
        assert!(matches!(
            KeyApprovals::new(&[], many),
            Err(HoldError::TooManyGrants)
        ));
    }
}

//! A real Matrix homeserver for the Matrix channel's tests: Synapse (from PyPI, in the
//! virtualenv `./test.sh synapse` installs) on a loopback port with a SQLite database in
//! a temporary directory. One homeserver serves every test of a binary; each test
//! registers its own users (through the shared-secret admin API), so tests share
//! nothing but the server. Synapse exits when the test binary does.

#![allow(dead_code)]

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// The version `./test.sh synapse` installs.
pub const SYNAPSE_VERSION: &str = "1.163.2";
/// The homeserver's name: user ids are `@name:localhost`.
pub const SERVER_NAME: &str = "localhost";
const SHARED_SECRET: &str = "saint-test-registration-secret";

/// The running homeserver.
pub struct Synapse {
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    directory: PathBuf,
    _child: Mutex<Child>,
}

static SYNAPSE: OnceLock<Synapse> = OnceLock::new();

/// The Python of the Synapse virtualenv: `SAINT_SYNAPSE`, else where `./test.sh`
/// caches it. Fails (never skips) when it is not installed.
fn python() -> PathBuf {
    let path = std::env::var_os("SAINT_SYNAPSE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("SAINT_CACHE_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                        .join(".cache/saint")
                });
            cache.join(format!("synapse-{SYNAPSE_VERSION}/bin/python"))
        });
    let installed = Command::new(&path)
        .args(["-c", "import synapse"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        installed,
        "Synapse is not installed at {} (SAINT_SYNAPSE): run `./test.sh synapse` (it installs \
         matrix-synapse=={SYNAPSE_VERSION} into ~/.cache/saint/synapse-{SYNAPSE_VERSION}) and \
         export SAINT_SYNAPSE=~/.cache/saint/synapse-{SYNAPSE_VERSION}/bin/python",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// Generous limits: the tests send in bursts from a few accounts.
const RATE_LIMITS: &str = r#"
rc_message: {per_second: 1000, burst_count: 1000}
rc_registration: {per_second: 1000, burst_count: 1000}
rc_login:
  address: {per_second: 1000, burst_count: 1000}
  account: {per_second: 1000, burst_count: 1000}
  failed_attempts: {per_second: 1000, burst_count: 1000}
rc_joins:
  local: {per_second: 1000, burst_count: 1000}
  remote: {per_second: 1000, burst_count: 1000}
rc_joins_per_room: {per_second: 1000, burst_count: 1000}
rc_invites:
  per_room: {per_second: 1000, burst_count: 1000}
  per_user: {per_second: 1000, burst_count: 1000}
  per_issuer: {per_second: 1000, burst_count: 1000}
rc_room_creation: {per_second: 1000, burst_count: 1000}
rc_3pid_validation: {per_second: 1000, burst_count: 1000}
rc_media_create: {per_second: 1000, burst_count: 1000}
"#;

fn write_config(directory: &Path, port: u16) -> PathBuf {
    let dir = directory.display();
    std::fs::write(
        directory.join("log.yaml"),
        format!(
            "version: 1\n\
             formatters: {{plain: {{format: '%(asctime)s %(name)s %(levelname)s %(message)s'}}}}\n\
             handlers: {{file: {{class: logging.FileHandler, formatter: plain, filename: {dir}/homeserver.log}}}}\n\
             root: {{level: INFO, handlers: [file]}}\n\
             disable_existing_loggers: false\n"
        ),
    )
    .unwrap();
    // A fixed test signing key (ed25519 seed), so no key generation step is needed.
    std::fs::write(
        directory.join("signing.key"),
        "ed25519 a_test AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n",
    )
    .unwrap();
    let config = format!(
        r#"server_name: "{SERVER_NAME}"
pid_file: {dir}/homeserver.pid
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: {dir}/homeserver.db
log_config: {dir}/log.yaml
media_store_path: {dir}/media
signing_key_path: {dir}/signing.key
registration_shared_secret: "{SHARED_SECRET}"
enable_registration: false
report_stats: false
macaroon_secret_key: "saint-test-macaroon-secret"
form_secret: "saint-test-form-secret"
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
presence:
  enabled: false
url_preview_enabled: false
enable_media_repo: true
{RATE_LIMITS}"#
    );
    let path = directory.join("homeserver.yaml");
    std::fs::write(&path, config).unwrap();
    path
}

// Runs Synapse under a watcher thread that ends it when the test binary (its parent)
// is gone, however that happened.
const LAUNCHER: &str = r#"
import os, runpy, shutil, sys, threading, time
parent = os.getppid()
config, directory = sys.argv[1], sys.argv[2]
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    shutil.rmtree(directory, ignore_errors=True)
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ["synapse.app.homeserver", "--config-path", config]
runpy.run_module("synapse.app.homeserver", run_name="__main__")
"#;

/// A plain HTTP GET on loopback, for the health check before any runtime exists.
fn health(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

impl Synapse {
    /// The shared homeserver, started by the first caller.
    pub fn shared() -> &'static Synapse {
        SYNAPSE.get_or_init(Synapse::start)
    }

    fn start() -> Synapse {
        let python = python();
        // Removed by the launcher when the test binary exits (the static is never
        // dropped).
        let directory = tempfile::tempdir().unwrap().keep();
        let port = free_port();
        let config = write_config(&directory, port);
        let started = Instant::now();
        let mut child = Command::new(&python)
            .args(["-c", LAUNCHER])
            .arg(&config)
            .arg(&directory)
            .current_dir(&directory)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(directory.join("stderr.log")).unwrap())
            .spawn()
            .expect("failed to start Synapse");
        loop {
            if health(port) {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "Synapse exited ({status}) while starting:\n{}\n{}",
                    tail(&directory.join("stderr.log")),
                    tail(&directory.join("homeserver.log"))
                );
            }
            if started.elapsed() > Duration::from_secs(90) {
                let _ = child.kill();
                panic!(
                    "Synapse did not answer /health within 90 s:\n{}",
                    tail(&directory.join("homeserver.log"))
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "synapse {SYNAPSE_VERSION} up on 127.0.0.1:{port} in {} ms",
            started.elapsed().as_millis()
        );
        Synapse {
            base_url: format!("http://127.0.0.1:{port}"),
            directory,
            _child: Mutex::new(child),
        }
    }

    /// The end of the homeserver's log, for failure messages.
    pub fn log_tail(&self) -> String {
        tail(&self.directory.join("homeserver.log"))
    }

    /// Registers `localpart` through the shared-secret admin API (nonce, then an
    /// HMAC-SHA1 of nonce, user, password and admin flag); returns its session.
    pub async fn register(&self, localpart: &str) -> User {
        self.register_as(localpart, false).await
    }

    /// Registers a server administrator.
    pub async fn register_admin(&self, localpart: &str) -> User {
        self.register_as(localpart, true).await
    }

    async fn register_as(&self, localpart: &str, admin: bool) -> User {
        // A client per test: a pooled connection must not outlive its test's runtime.
        let client = reqwest::Client::new();
        let url = format!("{}/_synapse/admin/v1/register", self.base_url);
        let nonce = client.get(&url).send().await.unwrap();
        let nonce: Value = nonce.json().await.unwrap();
        let nonce = nonce["nonce"].as_str().unwrap().to_string();
        let password = format!("{localpart}-password");
        let flag = if admin { "admin" } else { "notadmin" };
        let mac = hmac_sha1(SHARED_SECRET, &[&nonce, localpart, &password, flag]);
        let response = client
            .post(&url)
            .json(
                &json!({"nonce": nonce, "username": localpart, "password": password,
                           "admin": admin, "mac": mac}),
            )
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert!(status.is_success(), "registering {localpart}: {body}");
        User {
            id: body["user_id"].as_str().unwrap().to_string(),
            token: body["access_token"].as_str().unwrap().to_string(),
            base_url: self.base_url.clone(),
            client,
        }
    }
}

// The test binary has no SHA-1 of its own; the virtualenv's Python computes the MAC.
fn hmac_sha1(key: &str, fields: &[&str]) -> String {
    let output = Command::new(python())
        .args([
            "-c",
            "import hmac, hashlib, sys\n\
             print(hmac.new(sys.argv[1].encode(), '\\x00'.join(sys.argv[2:]).encode(), hashlib.sha1).hexdigest())",
            key,
        ])
        .args(fields)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// A registered account and its session.
#[derive(Clone)]
pub struct User {
    /// `@name:localhost`.
    pub id: String,
    /// Its access token.
    pub token: String,
    base_url: String,
    client: reqwest::Client,
}

fn encode(segment: &str) -> String {
    let mut url = reqwest::Url::parse("http://x/").unwrap();
    url.path_segments_mut().unwrap().push(segment);
    url.path()[1..].to_string()
}

impl User {
    /// A client-server API request as this user; the status and JSON answer.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .client
            .request(
                method,
                format!("{}/_matrix/client/v3/{path}", self.base_url),
            )
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.call(method, path, body).await;
        assert!(
            (200..300).contains(&status),
            "{} {path}: HTTP {status} {answer}",
            self.id
        );
        answer
    }

    /// As an administrator: limits `user` to `per_second` messages, in bursts of
    /// `burst` (the admin API's per-user rate limit override).
    pub async fn limit_messages(&self, user: &str, per_second: u32, burst: u32) {
        let response = self
            .client
            .post(format!(
                "{}/_synapse/admin/v1/users/{}/override_ratelimit",
                self.base_url,
                encode(user)
            ))
            .bearer_auth(&self.token)
            .json(&json!({"messages_per_second": per_second, "burst_count": burst}))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{:?}",
            response.text().await
        );
    }

    /// Creates a room with `body` (`/createRoom`); returns its id.
    pub async fn create_room(&self, body: Value) -> String {
        let answer = self
            .ok(reqwest::Method::POST, "createRoom", Some(body))
            .await;
        answer["room_id"].as_str().unwrap().to_string()
    }

    /// Joins `room`.
    pub async fn join(&self, room: &str) {
        self.ok(
            reqwest::Method::POST,
            &format!("join/{}", encode(room)),
            Some(json!({})),
        )
        .await;
    }

    /// Leaves `room`.
    pub async fn leave(&self, room: &str) {
        self.ok(
            reqwest::Method::POST,
            &format!("rooms/{}/leave", encode(room)),
            Some(json!({})),
        )
        .await;
    }

    /// Marks `room` direct with `user` in this user's `m.direct` account data, as a
    /// client does when it joins a direct room.
    pub async fn mark_direct(&self, user: &str, room: &str) {
        let mut direct = self.account_data("m.direct").await;
        if !direct.is_object() {
            direct = json!({});
        }
        let mut rooms = direct[user].as_array().cloned().unwrap_or_default();
        rooms.push(json!(room));
        direct[user] = Value::Array(rooms);
        self.ok(
            reqwest::Method::PUT,
            &format!("user/{}/account_data/m.direct", encode(&self.id)),
            Some(direct),
        )
        .await;
    }

    /// This user's account data of `event_type` (`Null` if there is none).
    pub async fn account_data(&self, event_type: &str) -> Value {
        let (status, answer) = self
            .call(
                reqwest::Method::GET,
                &format!("user/{}/account_data/{event_type}", encode(&self.id)),
                None,
            )
            .await;
        if status == 404 { Value::Null } else { answer }
    }

    /// Sends an event of `event_type`; returns its id.
    pub async fn send(&self, room: &str, event_type: &str, content: Value) -> String {
        static TRANSACTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let transaction = TRANSACTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let answer = self
            .ok(
                reqwest::Method::PUT,
                &format!(
                    "rooms/{}/send/{event_type}/test-{transaction}",
                    encode(room)
                ),
                Some(content),
            )
            .await;
        answer["event_id"].as_str().unwrap().to_string()
    }

    /// Sends a plain text message; returns its id.
    pub async fn say(&self, room: &str, text: &str) -> String {
        self.send(
            room,
            "m.room.message",
            json!({"msgtype": "m.text", "body": text}),
        )
        .await
    }

    /// Sends a text that mentions `user` the way clients do (`m.mentions` and a pill).
    pub async fn say_to(&self, room: &str, user: &User, text: &str) -> String {
        self.send(
            room,
            "m.room.message",
            json!({"msgtype": "m.text", "body": format!("{}: {text}", user.id),
                   "format": "org.matrix.custom.html",
                   "formatted_body": format!("<a href=\"https://matrix.to/#/{}\">{}</a>: {text}", user.id, user.id),
                   "m.mentions": {"user_ids": [user.id]}}),
        )
        .await
    }

    /// Redacts event `event_id` of `room` (a client's "delete message").
    pub async fn redact(&self, room: &str, event_id: &str) {
        static TRANSACTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let transaction = TRANSACTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.ok(
            reqwest::Method::PUT,
            &format!(
                "rooms/{}/redact/{}/redact-{transaction}",
                encode(room),
                encode(event_id)
            ),
            Some(json!({"reason": "sent by mistake"})),
        )
        .await;
    }

    /// Whether Synapse serves `event_id` of `room` as redacted (it applied the redaction).
    pub async fn is_redacted(&self, room: &str, event_id: &str) -> bool {
        let (status, answer) = self
            .call(
                reqwest::Method::GET,
                &format!("rooms/{}/event/{}", encode(room), encode(event_id)),
                None,
            )
            .await;
        status == 200 && !answer["unsigned"]["redacted_because"].is_null()
    }

    /// Whether Synapse's sync stream has reached `event_id` of `room`: an initial sync
    /// shows it in the room's timeline. Reading an event (`is_redacted`) does not say
    /// so: under load the stream a sync serves lags behind what is stored, and a sync
    /// made then serves the earlier events without the later ones.
    pub async fn sync_reached(&self, room: &str, event_id: &str) -> bool {
        let filter = encode(&json!({"room": {"timeline": {"limit": 100}}}).to_string());
        let (status, answer) = self
            .call(
                reqwest::Method::GET,
                &format!("sync?timeout=0&filter={filter}"),
                None,
            )
            .await;
        status == 200
            && answer["rooms"]["join"][room]["timeline"]["events"]
                .as_array()
                .is_some_and(|events| events.iter().any(|event| event["event_id"] == event_id))
    }

    /// `user`'s membership of `room` (`join`, `invite`, `leave`…), as this user sees it.
    pub async fn membership(&self, room: &str, user: &str) -> Option<String> {
        let (status, answer) = self
            .call(
                reqwest::Method::GET,
                &format!(
                    "rooms/{}/state/m.room.member/{}",
                    encode(room),
                    encode(user)
                ),
                None,
            )
            .await;
        (status == 200)
            .then(|| answer["membership"].as_str().map(str::to_string))
            .flatten()
    }

    /// The room's message events, oldest first (the last 200).
    pub async fn messages(&self, room: &str) -> Vec<Value> {
        let answer = self
            .ok(
                reqwest::Method::GET,
                &format!("rooms/{}/messages?dir=b&limit=200", encode(room)),
                None,
            )
            .await;
        let mut events: Vec<Value> = answer["chunk"].as_array().cloned().unwrap_or_default();
        events.reverse();
        events
            .into_iter()
            .filter(|event| event["type"] == "m.room.message")
            .collect()
    }

    /// Rooms this user is invited to, from an initial sync.
    pub async fn invited_rooms(&self) -> Vec<String> {
        let answer = self.ok(reqwest::Method::GET, "sync?timeout=0", None).await;
        answer["rooms"]["invite"]
            .as_object()
            .map(|rooms| rooms.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Downloads `mxc://<server>/<id>` through authenticated media (Matrix 1.11); the
    /// status, `Content-Type` and bytes.
    pub async fn download(&self, uri: &str) -> (u16, String, Vec<u8>) {
        let path = uri.strip_prefix("mxc://").expect("an mxc:// URI");
        let response = self
            .client
            .get(format!(
                "{}/_matrix/client/v1/media/download/{path}",
                self.base_url
            ))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string();
        (
            status,
            content_type,
            response.bytes().await.unwrap().to_vec(),
        )
    }

    /// Uploads `data` to the media repository; returns its `mxc://` URI.
    pub async fn upload(&self, content_type: &str, data: Vec<u8>) -> String {
        let response = self
            .client
            .post(format!("{}/_matrix/media/v3/upload", self.base_url))
            .bearer_auth(&self.token)
            .header("content-type", content_type)
            .body(data)
            .send()
            .await
            .unwrap();
        let answer: Value = response.json().await.unwrap();
        answer["content_uri"]
            .as_str()
            .unwrap_or_else(|| panic!("upload refused: {answer}"))
            .to_string()
    }
}

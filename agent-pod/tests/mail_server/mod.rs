//! A real mail server on loopback for the e-mail tests and the channels bench: Dovecot
//! (IMAP with IDLE, submission with AUTH, LMTP delivery) and OpenSMTPD (the MTA in
//! front of it), from Debian's packages; a DNS server that publishes DKIM keys; and
//! DKIM signing with a test key.

#![allow(dead_code)]

use std::{
    net::{SocketAddr, TcpListener, UdpSocket},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use base64::Engine;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor, address::Envelope};
use mail_auth::{
    common::{crypto::Ed25519Key, headers::HeaderWriter},
    dkim::DkimSigner,
};

pub const BOT: &str = "saint@acme.example";
pub const BOT_PASSWORD: &str = "bot-password";
pub const ANA: &str = "ana@acme.example";
pub const ANA_PASSWORD: &str = "ana-password";

// One OpenSMTPD at a time: it keeps its control socket and queue at fixed paths.
static MAIL_SERVER: Mutex<()> = Mutex::new(());

/// `N` distinct free loopback ports. The listeners are held until all are chosen: a
/// port bound and released one at a time can be handed out again by the next bind,
/// and Dovecot then refuses its configuration ("duplicate listener").
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|index| listeners[index].local_addr().unwrap().port())
}

/// How many times `start` picks new ports when a server cannot open one: between the
/// pick and the server's bind another test's process may take a released port.
const ATTEMPTS: usize = 3;

/// The running processes of one attempt.
struct Launched {
    directory: tempfile::TempDir,
    dovecot: Child,
    smtpd: Child,
    imap: u16,
    submission: u16,
    mta: u16,
}

fn require(binary: &str) {
    assert!(
        Path::new(binary).exists(),
        "{binary} is missing: install Debian's dovecot-imapd, dovecot-lmtpd, dovecot-submissiond and opensmtpd (./test.sh does)"
    );
}

/// Dovecot and OpenSMTPD on loopback ports, in a temporary directory.
pub struct MailServer {
    _lock: MutexGuard<'static, ()>,
    directory: tempfile::TempDir,
    dovecot: Child,
    smtpd: Child,
    pub imap: u16,
    pub submission: u16,
    pub mta: u16,
}

impl MailServer {
    pub fn start() -> Self {
        let lock = MAIL_SERVER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        require("/usr/sbin/dovecot");
        require("/usr/sbin/smtpd");
        require("/usr/lib/dovecot/submission");
        require("/usr/lib/dovecot/lmtp");
        // OpenSMTPD's control socket has a fixed path: a system instance would make
        // ours exit at start.
        assert!(
            std::os::unix::net::UnixStream::connect("/var/run/smtpd.sock").is_err(),
            "a system OpenSMTPD is running (/var/run/smtpd.sock answers); stop it \
             (service opensmtpd stop) to run the e-mail tests"
        );
        let mut failures = Vec::new();
        for _ in 0..ATTEMPTS {
            match Self::launch() {
                Ok(launched) => {
                    let Launched {
                        directory,
                        dovecot,
                        smtpd,
                        imap,
                        submission,
                        mta,
                    } = launched;
                    return Self {
                        _lock: lock,
                        directory,
                        dovecot,
                        smtpd,
                        imap,
                        submission,
                        mta,
                    };
                }
                Err(failure) => {
                    eprintln!("mail server did not start, picking new ports: {failure}");
                    failures.push(failure);
                }
            }
        }
        panic!(
            "mail server did not start in {ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }

    /// One attempt: new ports, a new directory, both servers started and every port
    /// answering — or both stopped again and why.
    fn launch() -> Result<Launched, String> {
        let directory = tempfile::Builder::new()
            .prefix("saint-mail")
            .tempdir()
            .unwrap();
        let root = directory.path();
        for sub in ["mail", "run", "state"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        // Dovecot's mail processes run as the `dovecot` user; its mail folder is theirs.
        let status = Command::new("chown")
            .args(["dovecot:dovecot"])
            .arg(root.join("mail"))
            .status()
            .unwrap();
        assert!(status.success());
        let mut permissions = std::fs::metadata(root).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(root, permissions).unwrap();
        std::fs::write(
            root.join("users"),
            format!("{BOT}:{{PLAIN}}{BOT_PASSWORD}\n{ANA}:{{PLAIN}}{ANA_PASSWORD}\n"),
        )
        .unwrap();
        let [imap, lmtp, submission, mta] = free_ports::<4>();
        let root_text = root.display();
        std::fs::write(
            root.join("dovecot.conf"),
            format!(
                "base_dir = {root_text}/run\nstate_dir = {root_text}/state\nlog_path = {root_text}/dovecot.log\n\
                 instance_name = saint-test-{imap}\nprotocols = imap lmtp submission\nlisten = 127.0.0.1\n\
                 ssl = no\ndisable_plaintext_auth = no\nauth_mechanisms = plain login\n\
                 mail_location = maildir:{root_text}/mail/%u\ndefault_internal_user = dovecot\n\
                 default_login_user = dovenull\nfirst_valid_uid = 100\nhostname = mail.acme.example\n\
                 passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {root_text}/users\n}}\n\
                 userdb {{\n  driver = static\n  args = uid=dovecot gid=dovecot home={root_text}/mail/%u allow_all_users=yes\n}}\n\
                 service imap-login {{\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {imap}\n  }}\n  inet_listener imaps {{\n    port = 0\n  }}\n}}\n\
                 service lmtp {{\n  inet_listener lmtp {{\n    address = 127.0.0.1\n    port = {lmtp}\n  }}\n}}\n\
                 service submission-login {{\n  inet_listener submission {{\n    address = 127.0.0.1\n    port = {submission}\n  }}\n}}\n\
                 submission_relay_host = 127.0.0.1\nsubmission_relay_port = {mta}\nsubmission_relay_trusted = yes\n"
            ),
        )
        .unwrap();
        let smtpd_conf = root.join("smtpd.conf");
        std::fs::write(
            &smtpd_conf,
            format!(
                "listen on 127.0.0.1 port {mta}\n\
                 action \"deliver\" lmtp \"127.0.0.1:{lmtp}\" rcpt-to virtual {{ \"@\" = dovecot }}\n\
                 match from any for any action \"deliver\"\n"
            ),
        )
        .unwrap();
        let mut permissions = std::fs::metadata(&smtpd_conf).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o600);
        std::fs::set_permissions(&smtpd_conf, permissions).unwrap();
        let dovecot = Command::new("/usr/sbin/dovecot")
            .arg("-F")
            .arg("-c")
            .arg(root.join("dovecot.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // OpenSMTPD's queue lives at a fixed path: mail an earlier run left queued would
        // be delivered into this run's mailboxes.
        for queue in ["queue", "incoming", "temporary", "corrupt", "purge"] {
            let path = Path::new("/var/spool/smtpd").join(queue);
            if path.exists() {
                for entry in std::fs::read_dir(&path).unwrap() {
                    let entry = entry.unwrap().path();
                    let _ =
                        std::fs::remove_dir_all(&entry).or_else(|_| std::fs::remove_file(&entry));
                }
            }
        }
        let smtpd_log = std::fs::File::create(root.join("smtpd.log")).unwrap();
        let smtpd = Command::new("/usr/sbin/smtpd")
            .arg("-d")
            .arg("-f")
            .arg(&smtpd_conf)
            .stdout(Stdio::null())
            .stderr(smtpd_log)
            .spawn()
            .unwrap();
        let mut launched = Launched {
            directory,
            dovecot,
            smtpd,
            imap,
            submission,
            mta,
        };
        for port in [imap, submission, mta, lmtp] {
            if let Err(failure) = launched.wait_for_port(port) {
                stop(&mut launched.dovecot);
                stop(&mut launched.smtpd);
                return Err(failure);
            }
        }
        Ok(launched)
    }

    /// Closes every IMAP connection of `user` (as a server restart or network drop would).
    pub fn kick(&self, user: &str) {
        let status = Command::new("/usr/bin/doveadm")
            .arg("-c")
            .arg(self.directory.path().join("dovecot.conf"))
            .args(["kick", user])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "doveadm kick failed");
    }

    /// Delivers `raw` as the internet's mail would reach the company: through the MTA.
    pub async fn deliver(&self, from: &str, to: &str, raw: &[u8]) {
        let mta = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
            .port(self.mta)
            .build();
        let envelope =
            Envelope::new(Some(from.parse().unwrap()), vec![to.parse().unwrap()]).unwrap();
        mta.send_raw(&envelope, raw).await.unwrap();
    }

    /// Every message in `user`'s inbox, oldest first.
    pub async fn mailbox(&self, user: &str, password: &str) -> Vec<Vec<u8>> {
        use futures::TryStreamExt;
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.imap))
            .await
            .unwrap();
        let mut client = async_imap::Client::new(tcp);
        client.read_response().await.unwrap();
        let mut session = client
            .login(user, password)
            .await
            .map_err(|(error, _)| error)
            .unwrap();
        let mailbox = session.select("INBOX").await.unwrap();
        if mailbox.exists == 0 {
            return Vec::new();
        }
        let fetched: Vec<_> = session
            .fetch("1:*", "BODY.PEEK[]")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let messages = fetched
            .iter()
            .filter_map(|fetch| fetch.body().map(<[u8]>::to_vec))
            .collect();
        session.logout().await.unwrap();
        messages
    }
}

impl Launched {
    /// Waits until `port` accepts a connection; fails at once when a server exited
    /// (a port taken, a refused configuration), else after five seconds.
    fn wait_for_port(&mut self, port: u16) -> Result<(), String> {
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            let exited = [&mut self.dovecot, &mut self.smtpd]
                .into_iter()
                .any(|child| matches!(child.try_wait(), Ok(Some(_))));
            if exited {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let log = |name: &str| {
            std::fs::read_to_string(self.directory.path().join(name)).unwrap_or_default()
        };
        Err(format!(
            "mail server port {port} never opened; dovecot log:\n{}\nsmtpd log:\n{}",
            log("dovecot.log"),
            log("smtpd.log")
        ))
    }
}

fn stop(child: &mut Child) {
    // SIGTERM: Dovecot's master stops its login and mail processes with it.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(child),
        rustix::process::Signal::TERM,
    );
    let _ = child.wait();
}

impl Drop for MailServer {
    fn drop(&mut self) {
        stop(&mut self.dovecot);
        stop(&mut self.smtpd);
    }
}

/// A DNS server on loopback answering TXT queries for the names it publishes (and
/// NXDOMAIN for the rest), as the real DNS would for a domain's DKIM key.
pub struct Dns {
    pub address: SocketAddr,
    records: Arc<Mutex<Vec<(String, String)>>>,
}

impl Dns {
    pub fn start() -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = socket.local_addr().unwrap();
        let records: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let published = records.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 1500];
            while let Ok((length, peer)) = socket.recv_from(&mut buffer) {
                if let Some(answer) = answer(&buffer[..length], &published.lock().unwrap()) {
                    let _ = socket.send_to(&answer, peer);
                }
            }
        });
        Self { address, records }
    }

    pub fn publish(&self, name: &str, text: &str) {
        self.records
            .lock()
            .unwrap()
            .push((name.to_lowercase(), text.to_string()));
    }
}

fn answer(query: &[u8], records: &[(String, String)]) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    let mut offset = 12;
    let mut labels = Vec::new();
    loop {
        let length = *query.get(offset)? as usize;
        offset += 1;
        if length == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(offset..offset + length)?).to_lowercase());
        offset += length;
    }
    let question_end = offset + 4;
    let qtype = u16::from_be_bytes([*query.get(offset)?, *query.get(offset + 1)?]);
    let name = labels.join(".");
    let matches: Vec<&String> = records
        .iter()
        .filter(|(record, _)| *record == name && qtype == 16)
        .map(|(_, text)| text)
        .collect();
    let mut response = Vec::new();
    response.extend_from_slice(&query[..2]);
    let rcode: u8 = if records.iter().any(|(record, _)| *record == name) {
        0
    } else {
        3
    };
    response.extend_from_slice(&[0x84, 0x80 | rcode]);
    response.extend_from_slice(&[0, 1]);
    response.extend_from_slice(&(matches.len() as u16).to_be_bytes());
    response.extend_from_slice(&[0, 0, 0, 0]);
    response.extend_from_slice(query.get(12..question_end)?);
    for text in matches {
        let mut data = Vec::new();
        for chunk in text.as_bytes().chunks(255) {
            data.push(chunk.len() as u8);
            data.extend_from_slice(chunk);
        }
        response.extend_from_slice(&[0xC0, 0x0C, 0, 16, 0, 1, 0, 0, 0, 60]);
        response.extend_from_slice(&(data.len() as u16).to_be_bytes());
        response.extend_from_slice(&data);
    }
    Some(response)
}

/// A DKIM key for `domain` with selector `selector`, published in `dns`.
pub struct DkimKey {
    seed: [u8; 32],
    public: [u8; 32],
    domain: String,
    selector: String,
}

impl DkimKey {
    pub fn publish(dns: &Dns, domain: &str, selector: &str, seed: u8) -> Self {
        let seed = [seed; 32];
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        dns.publish(
            &format!("{selector}._domainkey.{domain}"),
            &format!(
                "v=DKIM1; k=ed25519; p={}",
                base64::engine::general_purpose::STANDARD.encode(public)
            ),
        );
        Self {
            seed,
            public,
            domain: domain.to_string(),
            selector: selector.to_string(),
        }
    }

    pub fn sign(&self, raw: &str) -> Vec<u8> {
        let key = Ed25519Key::from_seed_and_public_key(&self.seed, &self.public).unwrap();
        let signature = DkimSigner::from_key(key)
            .domain(self.domain.clone())
            .selector(self.selector.clone())
            .headers(["From", "To", "Subject", "Message-ID"])
            .sign(raw.as_bytes())
            .unwrap();
        let mut signed = signature.to_header().into_bytes();
        signed.extend_from_slice(raw.as_bytes());
        signed
    }
}

pub fn mail(
    from: &str,
    subject: &str,
    message_id: &str,
    body: &str,
    extra_headers: &str,
) -> String {
    format!(
        "From: {from}\r\nTo: {BOT}\r\nSubject: {subject}\r\nMessage-ID: <{message_id}>\r\n\
         Date: Wed, 25 Nov 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n{extra_headers}\
         Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    )
}

/// A relay in front of Dovecot's IMAP port that holds the first command containing a
/// given text (`UID FETCH`) until the test releases it: the test can then make mail
/// arrive exactly while the bot's fetch is under way.
pub struct HeldImap {
    pub port: u16,
    /// Fires when the held command arrived (it has not reached the server yet).
    pub held: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Lets the held command through.
    pub release: Option<tokio::sync::oneshot::Sender<()>>,
}

type Hold = (
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::oneshot::Receiver<()>,
);

impl HeldImap {
    pub async fn start(imap: u16, command: &'static str) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (held_sender, held) = tokio::sync::oneshot::channel();
        let (release, release_receiver) = tokio::sync::oneshot::channel();
        let hold: Arc<tokio::sync::Mutex<Option<Hold>>> = Arc::new(tokio::sync::Mutex::new(Some(
            (held_sender, release_receiver),
        )));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", imap))
                    .await
                    .unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let hold = hold.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let read = match client_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(read) => read,
                        };
                        let text = String::from_utf8_lossy(&buffer[..read]).to_uppercase();
                        if text.contains(command) {
                            let taken = hold.lock().await.take();
                            if let Some((held, release)) = taken {
                                let _ = held.send(());
                                let _ = release.await;
                            }
                        }
                        if server_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self {
            port,
            held: Some(held),
            release: Some(release),
        }
    }
}

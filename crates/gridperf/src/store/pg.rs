//! The PostgreSQL archive's connection: every wait on the server has a
//! deadline (connecting, the start-up exchange and each statement; a
//! server that accepts and never answers ends in an error, not a hang),
//! and TLS as libpq offers it (`sslmode` disable, allow, prefer, require,
//! verify-ca, verify-full; `sslrootcert` a file, or `system`), by rustls.
//! Nothing is downgraded without a word: `prefer` to a server without TLS
//! says so on stderr, and every other mode that asks for TLS fails without it.
//!
//! tokio-postgres does the protocol on a runtime of one thread that runs
//! only while a call waits; the calls are blocking, as the store's are.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

/// How long a statement may run on the archive server, unless the DSN's
/// `options` set `statement_timeout`.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting (the start-up exchange and TLS included) may take, unless the DSN says.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// What the client waits beyond the server's own statement deadline
/// before it gives the connection up.
const MARGIN: Duration = Duration::from_secs(5);

/// TLS, as libpq's sslmode names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!("sslmode={other}: give disable, allow, prefer, require, verify-ca or verify-full"))
            }
        })
    }
}

/// The DSN's TLS settings, taken out of it (tokio-postgres knows only
/// three sslmodes and no sslrootcert), and the DSN without them.
#[derive(Debug, Clone, PartialEq)]
pub struct Tls {
    pub mode: SslMode,
    pub root_cert: Option<String>,
}

/// Splits a DSN (a `postgres://` URL, or libpq's `key=value` words) into
/// the rest and its TLS settings (default: prefer, as libpq).
pub fn split_tls(dsn: &str) -> Result<(String, Tls), String> {
    let mut mode = None;
    let mut root_cert = None;
    let mut take = |k: &str, v: &str| -> Result<bool, String> {
        match k {
            "sslmode" => mode = Some(SslMode::parse(v)?),
            "sslrootcert" => root_cert = Some(v.to_string()),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        match dsn.split_once('?') {
            None => dsn.to_string(),
            Some((base, q)) => {
                let mut kept = Vec::new();
                for pair in q.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(k, &percent_decode(v))? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for (word, k, v) in kv_words(dsn)? {
            if !take(&k, &v)? {
                kept.push(word);
            }
        }
        kept.join(" ")
    };
    Ok((rest, Tls { mode: mode.unwrap_or(SslMode::Prefer), root_cert }))
}

/// libpq's `key=value` words (a value may be 'quoted', with \' and \\): each word as written, its key and value.
fn kv_words(dsn: &str) -> Result<Vec<(String, String, String)>, String> {
    let mut out = Vec::new();
    let mut it = dsn.chars().peekable();
    loop {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.peek().is_none() {
            return Ok(out);
        }
        let mut word = String::new();
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            word.push(c);
            it.next();
        }
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.next() != Some('=') {
            return Err(format!("{key} in the DSN has no value: give key=value"));
        }
        word.push('=');
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        let mut value = String::new();
        if it.peek() == Some(&'\'') {
            word.push('\'');
            it.next();
            loop {
                match it.next() {
                    None => return Err(format!("{key}'s value in the DSN has no closing quote")),
                    Some('\'') => {
                        word.push('\'');
                        break;
                    }
                    Some('\\') => {
                        let c = it.next().ok_or_else(|| format!("{key}'s value in the DSN ends in \\"))?;
                        word.push('\\');
                        word.push(c);
                        value.push(c);
                    }
                    Some(c) => {
                        word.push(c);
                        value.push(c);
                    }
                }
            }
        } else {
            while let Some(&c) = it.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                value.push(c);
                it.next();
            }
        }
        out.push((word, key, value));
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The statement timeout the DSN's `options` set (`-c statement_timeout=N`,
/// N in ms, or with a unit: 5s, 2min).
fn options_statement_timeout(options: &str) -> Option<Duration> {
    let at = options.find("statement_timeout=")?;
    let v: String = options[at + "statement_timeout=".len()..].chars().take_while(|c| !c.is_whitespace()).collect();
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().ok()?;
    let unit = &v[digits.len()..];
    let ms = match unit {
        "" | "ms" => n,
        "s" => n.saturating_mul(1000),
        "min" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return None,
    };
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// A connection to the archive server.
pub struct Pg {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    /// What the client waits for any answer.
    deadline: Duration,
    /// Where, for the errors.
    server: String,
    /// A deadline passed: the connection is not used again.
    broken: std::cell::Cell<bool>,
}

/// A failure of the archive connection: its words, and whether it is the
/// connection (unreachable, gone, silent) or the server turning it away.
#[derive(Debug)]
pub struct PgError {
    pub text: String,
    pub connection: bool,
    pub refused: bool,
    /// What the DSN asks for cannot be done (a bad sslmode, no root certificate).
    pub usage: bool,
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> PgError {
        // the server's own message where there is one (the driver's
        // Display says only "db error")
        let text = match e.as_db_error() {
            Some(d) => format!("{}: {}", d.severity(), d.message()),
            None => {
                let mut t = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    t.push_str(&format!(": {s}"));
                    src = s.source();
                }
                t
            }
        };
        PgError { connection: e.is_closed(), refused: false, usage: false, text }
    }
}

fn usage(text: String) -> PgError {
    PgError { text, connection: false, refused: false, usage: true }
}

impl Pg {
    /// Connects, within the DSN's connect_timeout (default CONNECT_TIMEOUT)
    /// for everything up to the first statement.
    pub fn connect(dsn: &str) -> Result<Pg, PgError> {
        let (rest, tls) = split_tls(dsn).map_err(|e| usage(format!("not a usable DSN: {e}")))?;
        let mut config: tokio_postgres::Config =
            rest.parse().map_err(|e: tokio_postgres::Error| usage(format!("not a usable DSN: {e}")))?;
        let within = config.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT);
        config.connect_timeout(within);
        if config.get_application_name().is_none() {
            config.application_name("gridperf");
        }
        config.keepalives(true).keepalives_idle(Duration::from_secs(30));
        config.tcp_user_timeout(STATEMENT_TIMEOUT);
        config.ssl_mode(match tls.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
        });
        let server = config
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(t) => t.clone(),
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect::<Vec<_>>()
            .join(",");
        let over_tcp = config.get_hosts().iter().any(|h| matches!(h, tokio_postgres::config::Host::Tcp(_)));
        let server_timeout = config.get_options().and_then(options_statement_timeout);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| usage(format!("no runtime for the archive's connection: {e}")))?;
        let used = Arc::new(AtomicBool::new(false));
        let make =
            Tracked { inner: tokio_postgres_rustls::MakeRustlsConnect::new(client_config(&tls)?), used: used.clone() };
        // the timer is made inside the runtime (it needs its clock)
        let (client, connection) = match rt.block_on(async { tokio::time::timeout(within, config.connect(make)).await })
        {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                // the server answered, and said no; or no server answered
                let refused = e.as_db_error().is_some();
                let mut err = PgError { connection: !refused, refused, ..PgError::from(e) };
                if tls.mode == SslMode::Require || tls.mode == SslMode::VerifyCa || tls.mode == SslMode::VerifyFull {
                    err.text.push_str(
                        " (sslmode asks for TLS: a server without it, or whose certificate did not hold, is refused)",
                    );
                }
                return Err(err);
            }
            Err(_) => {
                return Err(PgError {
                    text: format!(
                        "the archive server at {server} did not complete the connection within {} s (it accepted \
                         and said nothing: not a PostgreSQL server, or one that hangs)",
                        within.as_secs_f64()
                    ),
                    connection: true,
                    refused: false,
                    usage: false,
                })
            }
        };
        rt.spawn(async move {
            let _ = connection.await;
        });
        if over_tcp && !used.load(Ordering::SeqCst) && tls.mode != SslMode::Disable {
            eprintln!(
                "gridperf: the archive at {server} took no TLS: what is stored crosses the network in plain text \
                 (sslmode={}; sslmode=require refuses a server without TLS)",
                if tls.mode == SslMode::Allow { "allow" } else { "prefer" }
            );
        }
        let deadline = server_timeout.unwrap_or(STATEMENT_TIMEOUT) + MARGIN;
        let pg = Pg { rt, client, deadline, server, broken: std::cell::Cell::new(false) };
        let mut setup = String::from("SET client_min_messages = warning");
        if server_timeout.is_none() {
            setup = format!("SET statement_timeout = {}; {setup}", STATEMENT_TIMEOUT.as_millis());
        }
        pg.batch(&setup)?;
        Ok(pg)
    }

    /// Runs `fut` within the deadline; after one missed, nothing more is sent.
    fn run<T>(&self, what: &str, fut: impl Future<Output = Result<T, tokio_postgres::Error>>) -> Result<T, PgError> {
        if self.broken.get() {
            return Err(PgError {
                text: format!("the archive server at {} stopped answering earlier: not used again", self.server),
                connection: true,
                refused: false,
                usage: false,
            });
        }
        match self.rt.block_on(async { tokio::time::timeout(self.deadline, fut).await }) {
            Ok(r) => r.map_err(PgError::from),
            Err(_) => {
                self.broken.set(true);
                Err(PgError {
                    text: format!(
                        "the archive server at {} did not answer {what} within {} s",
                        self.server,
                        self.deadline.as_secs_f64()
                    ),
                    connection: true,
                    refused: false,
                    usage: false,
                })
            }
        }
    }

    pub fn execute(&self, sql: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) -> Result<u64, PgError> {
        self.run("a statement", self.client.execute(sql, params))
    }

    pub fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, PgError> {
        self.run("a query", self.client.query(sql, params))
    }

    pub fn batch(&self, sql: &str) -> Result<(), PgError> {
        self.run("a statement", self.client.batch_execute(sql))
    }
}

/// Notes whether TLS was taken (the server agreed to it), for `prefer`'s word.
struct Tracked {
    inner: tokio_postgres_rustls::MakeRustlsConnect,
    used: Arc<AtomicBool>,
}

impl<S> MakeTlsConnect<S> for Tracked
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = TrackedConnect<<tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect>;
    type Error = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        let inner = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<S>>::make_tls_connect(
            &mut self.inner,
            hostname,
        )?;
        Ok(TrackedConnect { inner, used: self.used.clone() })
    }
}

struct TrackedConnect<T> {
    inner: T,
    used: Arc<AtomicBool>,
}

impl<S, T: TlsConnect<S>> TlsConnect<S> for TrackedConnect<T> {
    type Stream = T::Stream;
    type Error = T::Error;
    type Future = T::Future;

    fn connect(self, stream: S) -> T::Future {
        self.used.store(true, Ordering::SeqCst);
        self.inner.connect(stream)
    }
}

/// The rustls configuration for a mode: verify-full checks the chain and
/// the name, verify-ca the chain only, require and prefer nothing (as
/// libpq: require with a root certificate given checks the chain).
fn client_config(tls: &Tls) -> Result<rustls::ClientConfig, PgError> {
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, Error as TlsError, SignatureScheme};

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| usage(format!("TLS: {e}")))?;
    let check_chain = matches!(tls.mode, SslMode::VerifyCa | SslMode::VerifyFull)
        || (tls.mode == SslMode::Require && tls.root_cert.is_some());
    let chain = if check_chain {
        let roots = root_store(tls.root_cert.as_deref())?;
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| usage(format!("TLS: the root certificates: {e}")))?;
        if tls.mode == SslMode::VerifyFull {
            return Ok(builder.with_webpki_verifier(webpki).with_no_client_auth());
        }
        Some(webpki)
    } else {
        None
    };
    /// What checks less than verify-full: nothing (require and prefer), or
    /// the chain but not the name (verify-ca, and require with a root).
    /// The handshake's signatures are checked either way.
    #[derive(Debug)]
    struct Lenient {
        chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
        provider: Arc<rustls::crypto::CryptoProvider>,
    }
    impl ServerCertVerifier for Lenient {
        fn verify_server_cert(
            &self,
            end: &CertificateDer<'_>,
            mid: &[CertificateDer<'_>],
            name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, TlsError> {
            let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
            match chain.verify_server_cert(end, mid, name, ocsp, now) {
                Err(TlsError::InvalidCertificate(
                    rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, TlsError> {
            rustls::crypto::verify_tls12_signature(m, c, d, &self.provider.signature_verification_algorithms)
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, TlsError> {
            rustls::crypto::verify_tls13_signature(m, c, d, &self.provider.signature_verification_algorithms)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider.signature_verification_algorithms.supported_schemes()
        }
    }
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Lenient { chain, provider }))
        .with_no_client_auth())
}

/// The certificates a chain must lead to: sslrootcert's file, `system`'s
/// bundle, or ~/.postgresql/root.crt (libpq's default); none is an error
/// that says where to put one.
fn root_store(given: Option<&str>) -> Result<rustls::RootCertStore, PgError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let path = match given {
        Some("system") => ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| usage("sslrootcert=system: no system certificate bundle found".into()))?,
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_default();
            let p = home.join(".postgresql/root.crt");
            if !p.exists() {
                return Err(usage(format!(
                    "sslmode verify-ca and verify-full check the server's certificate against a root: give \
                     sslrootcert=FILE (or system), or keep it at {}",
                    p.display()
                )));
            }
            p
        }
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(&path).map_err(|e| usage(format!("sslrootcert {}: {e}", path.display())))?;
    for c in certs {
        let c = c.map_err(|e| usage(format!("sslrootcert {}: {e}", path.display())))?;
        roots.add(c).map_err(|e| usage(format!("sslrootcert {}: {e}", path.display())))?;
    }
    if roots.is_empty() {
        return Err(usage(format!("sslrootcert {}: no certificate in it", path.display())));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_are_taken_out_of_either_form_of_dsn() {
        let (rest, t) = split_tls("postgres://u@h:5432/db?sslmode=verify-full&sslrootcert=%2Fca.crt&connect_timeout=2")
            .expect("a URL");
        assert_eq!(rest, "postgres://u@h:5432/db?connect_timeout=2");
        assert_eq!(t, Tls { mode: SslMode::VerifyFull, root_cert: Some("/ca.crt".into()) });
        let (rest, t) = split_tls("host=h dbname='my db' sslmode=require user=u").expect("words");
        assert_eq!(rest, "host=h dbname='my db' user=u");
        assert_eq!(t.mode, SslMode::Require);
        let (rest, t) = split_tls("postgres://h/db").expect("plain");
        assert_eq!((rest.as_str(), t.mode, t.root_cert), ("postgres://h/db", SslMode::Prefer, None));
        assert!(split_tls("postgres://h/db?sslmode=always").err().is_some_and(|e| e.contains("verify-full")));
        assert!(split_tls("host=h dbname='open").is_err());
    }

    #[test]
    fn a_statement_timeout_in_the_options_sets_the_clients_deadline() {
        assert_eq!(options_statement_timeout("-c statement_timeout=2000"), Some(Duration::from_secs(2)));
        assert_eq!(options_statement_timeout("-c statement_timeout=3s -c x=y"), Some(Duration::from_secs(3)));
        assert_eq!(options_statement_timeout("-c work_mem=4MB"), None);
        assert_eq!(options_statement_timeout("-c statement_timeout=0"), None);
    }
}

//! Injected keys: a template's `inject: {HOST: {header, secret, prefix}}`
//! keeps a secret out of the sandbox. The agent gets a placeholder in its
//! place; the egress proxy, which alone holds the real value (in
//! FORAGE_HOME/egress/policy/keys/SANDBOX.json, mode 0600, mounted into the
//! proxy's container only), terminates the agent's TLS to HOST with a
//! certificate from a CA of this FORAGE_HOME's own, sets the header on every
//! request and sends it on over TLS it checks against the host's trusted roots.
//!
//! What both sides share lives here: the rules, their checks, the keys file,
//! the CA and the roots the proxy trusts upstream.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::policy::check_name;

/// One `inject` entry of a template, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectSpec {
    /// The request header the proxy sets, e.g. `x-api-key` or `authorization`.
    pub header: String,
    /// The secret (`up --secret NAME=…`) whose value goes in it.
    pub secret: String,
    /// Text put before the value, e.g. `"Bearer "`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

/// A template's `inject`, keyed by host name.
pub type InjectMap = BTreeMap<String, InjectSpec>;

/// One rule as a sandbox keeps it (its record): no value, only names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectRule {
    pub host: String,
    pub header: String,
    pub secret: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

/// One rule with its value, as the proxy reads it from the keys file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    pub host: String,
    pub header: String,
    /// The prefix and the secret's value: the header's whole value.
    pub value: String,
}

/// Where the CA's certificate and key, and the keys files, are kept in the
/// policy directory (which the proxy mounts read-only; no sandbox mounts it).
pub const CA_CERT: &str = "ca/cert.pem";
pub const CA_KEY: &str = "ca/key.pem";
pub const KEYS_DIR: &str = "keys";
/// The roots the proxy checks upstream servers against: a copy of the host's.
pub const UPSTREAM_ROOTS: &str = "upstream-roots.pem";
/// The most of a trust bundle forage copies or reads.
pub const MAX_BUNDLE: u64 = 4 << 20;
/// The most of a keys file the proxy reads.
const MAX_KEYS_FILE: u64 = 1 << 20;

/// Where the sandbox finds the CA (alone, and with the image's own roots).
pub const CA_INSIDE: &str = "/etc/forage/egress-ca.pem";
pub const BUNDLE_INSIDE: &str = "/etc/forage/ca-bundle.pem";
/// The image's usual bundle (Debian's, Alpine's), replaced by the combined one when present.
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The value the sandbox gets in place of secret `name`.
pub fn placeholder(name: &str) -> String {
    format!("forage-placeholder-{name}-the-egress-proxy-sets-the-real-key")
}

/// Checks a template's `inject`: exact host names, header names, secret names.
pub fn check(inject: &InjectMap) -> Result<(), String> {
    for (host, spec) in inject {
        check_name(host).map_err(|why| {
            format!("inject: {host:?} is not a host name ({why}); name one host exactly, such as api.anthropic.com")
        })?;
        if host.starts_with("*.") || host.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(format!("inject: {host:?} must be one host name in lowercase, not a glob"));
        }
        let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
        if spec.header.is_empty() || !spec.header.bytes().all(token) {
            return Err(format!("inject.{host}.header: {:?} is not an HTTP header name", spec.header));
        }
        if ["host", "content-length", "transfer-encoding", "connection"]
            .contains(&spec.header.to_ascii_lowercase().as_str())
        {
            return Err(format!(
                "inject.{host}.header: forage does not set {:?}; name the header the API reads its key from",
                spec.header
            ));
        }
        if !crate::template::secret_name_ok(&spec.secret) {
            return Err(format!(
                "inject.{host}.secret: {:?} is not a secret name ({})",
                spec.secret,
                crate::template::SECRET_NAME_RULE
            ));
        }
        if !is_header_value(spec.prefix.as_bytes()) {
            return Err(format!("inject.{host}.prefix: {:?} holds a control character", spec.prefix));
        }
    }
    Ok(())
}

/// Visible ASCII, spaces and tabs only: what a header value may hold.
pub fn is_header_value(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// A secret's value as a header gets it: trailing newlines dropped (as the
/// agent's variables drop them), one line of visible text.
pub fn header_value(secret: &str, value: &[u8]) -> Result<String, String> {
    let mut end = value.len();
    while end > 0 && matches!(value[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    let value = &value[..end];
    if value.is_empty() || !is_header_value(value) {
        return Err(format!(
            "secret {secret:?} is injected into a request header, so it must be one line of visible text; check its file"
        ));
    }
    Ok(String::from_utf8_lossy(value).into_owned())
}

/// The keys file of sandbox `name` in the policy directory `dir`.
pub fn keys_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(KEYS_DIR).join(format!("{name}.json"))
}

/// Writes `keys` for sandbox `name`, readable by the user alone, atomically.
pub fn write_keys(dir: &Path, name: &str, keys: &[Key]) -> std::io::Result<()> {
    let keys_dir = dir.join(KEYS_DIR);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&keys_dir)?;
    let tmp = keys_dir.join(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    write_private(&tmp, &serde_json::to_vec(keys)?)?;
    std::fs::rename(&tmp, keys_file(dir, name))
}

/// The keys of sandbox `name` (none without a file).
pub fn read_keys(dir: &Path, name: &str) -> std::io::Result<Vec<Key>> {
    let file = match std::fs::File::open(keys_file(dir, name)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.take(MAX_KEYS_FILE).read_to_end(&mut bytes)?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// Removes sandbox `name`'s keys file, if any.
pub fn remove_keys(dir: &Path, name: &str) -> std::io::Result<()> {
    match std::fs::remove_file(keys_file(dir, name)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.sync_all()
}

/// The CA's distinguished name and uses: the same when the CA is made and
/// when the proxy signs with it (rcgen signs from these, not from the
/// certificate, so both sides must build them alike).
pub fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, "forage egress proxy CA");
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "forage");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    params
}

/// The CA's certificate (PEM), made with its key on first need.
pub fn ensure_ca(dir: &Path) -> std::io::Result<String> {
    let (cert, key) = (dir.join(CA_CERT), dir.join(CA_KEY));
    if let (Ok(pem), true) = (std::fs::read_to_string(&cert), key.exists()) {
        return Ok(pem);
    }
    let ca_dir = dir.join("ca");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&ca_dir)?;
    let pair = rcgen::KeyPair::generate().map_err(std::io::Error::other)?;
    let made = ca_params().self_signed(&pair).map_err(std::io::Error::other)?;
    let pem = made.pem();
    // The key first: a certificate without its key would be taken as whole.
    let _ = std::fs::remove_file(&key);
    write_private(&key, pair.serialize_pem().as_bytes())?;
    let tmp = ca_dir.join(format!(".cert.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    write_private(&tmp, pem.as_bytes())?;
    std::fs::rename(&tmp, &cert)?;
    Ok(pem)
}

/// Copies the host's trusted roots (`bundle`) where the proxy reads them,
/// atomically; bounded.
pub fn copy_upstream_roots(dir: &Path, bundle: &Path) -> Result<(), String> {
    let shown = bundle.display();
    let file = std::fs::File::open(bundle).map_err(|e| {
        format!("the host's trusted roots {shown} cannot be read ({e}); the egress proxy checks injected hosts against them")
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_BUNDLE + 1).read_to_end(&mut bytes).map_err(|e| format!("reading {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_BUNDLE {
        return Err(format!("the host's trusted roots {shown} are over {} MiB", MAX_BUNDLE >> 20));
    }
    let tmp = dir.join(format!(".{UPSTREAM_ROOTS}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::rename(&tmp, dir.join(UPSTREAM_ROOTS)))
        .map_err(|e| format!("copying {shown} into {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(header: &str, secret: &str, prefix: &str) -> InjectMap {
        InjectMap::from([(
            "api.example.com".to_owned(),
            InjectSpec { header: header.into(), secret: secret.into(), prefix: prefix.into() },
        )])
    }

    #[test]
    fn rules_name_one_host_a_header_and_a_secret() {
        assert!(check(&spec("x-api-key", "anthropic", "")).is_ok());
        assert!(check(&spec("authorization", "openai", "Bearer ")).is_ok());
        let err = check(&spec("x api key", "anthropic", "")).unwrap_err();
        assert!(err.contains("not an HTTP header name"), "{err}");
        assert!(check(&spec("Host", "anthropic", "")).unwrap_err().contains("does not set"));
        assert!(check(&spec("x-api-key", "Bad Name", "")).unwrap_err().contains("not a secret name"));
        assert!(check(&spec("x-api-key", "a", "Bearer\r\n")).unwrap_err().contains("control character"));
        let glob = InjectMap::from([("*.example.com".to_owned(), spec("x", "a", "")["api.example.com"].clone())]);
        assert!(check(&glob).is_err());
    }

    #[test]
    fn a_value_is_one_line_of_visible_text() {
        assert_eq!(header_value("k", b"sk-123\n").unwrap(), "sk-123");
        assert!(header_value("k", b"sk-1\nsk-2").is_err());
        assert!(header_value("k", b"\n").is_err());
        assert!(header_value("k", b"caf\xc3\xa9").is_err());
    }

    #[test]
    fn keys_are_private_and_the_ca_is_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let keys = vec![Key { host: "h.test".into(), header: "x-api-key".into(), value: "v".into() }];
        write_keys(dir.path(), "box", &keys).unwrap();
        write_keys(dir.path(), "box", &keys).unwrap();
        assert_eq!(read_keys(dir.path(), "box").unwrap(), keys);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(keys_file(dir.path(), "box")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        remove_keys(dir.path(), "box").unwrap();
        assert!(read_keys(dir.path(), "box").unwrap().is_empty());
        let first = ensure_ca(dir.path()).unwrap();
        assert!(first.contains("BEGIN CERTIFICATE"));
        assert_eq!(ensure_ca(dir.path()).unwrap(), first);
        let mode = std::fs::metadata(dir.path().join(CA_KEY)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

//! HTTPS for [`HyperTransport`](crate::env::HyperTransport) (feature `https`):
//! rustls with the ring provider, HTTP/1.1 only (no ALPN is offered, so the
//! server speaks HTTP/1.1), so the strict origin-form, `Host` and keep-alive
//! behaviour of plain HTTP holds unchanged inside the tunnel. HTTP/2 is not
//! offered: it would need hyper's `http2` client and its own pool rules.
//!
//! Which certificates are trusted:
//! - [`native_roots`]: the platform's roots through `rustls-native-certs`,
//!   which reads `SSL_CERT_FILE` (a PEM bundle) and `SSL_CERT_DIR` when they
//!   are set, else the system's store. What [`HyperTransport::new`](crate::env::HyperTransport::new) uses.
//! - `webpki_roots()` (feature `webpki-roots`): Mozilla's roots compiled in,
//!   for a container without a CA bundle.
//! - [`config_with_roots`]: your own roots (a private CA, a test's certificate).
//!
//! A certificate the client does not trust fails the attempt as
//! [`TransportFailure::Unsendable`](crate::core::classify::TransportFailure::Unsendable):
//! nothing was sent, and no retry can fix a certificate, so the operation
//! ends at the first attempt with a message that says so.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// Why no TLS configuration could be built: no usable root certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSetupError(pub String);

impl std::fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsSetupError {}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client configuration that trusts `roots` and speaks TLS 1.2 and 1.3
/// with ring.
pub fn config_with_roots(roots: RootCertStore) -> ClientConfig {
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// A client configuration that trusts these certificates (DER), e.g. a
/// private CA's.
pub fn config_trusting(
    certs: impl IntoIterator<Item = CertificateDer<'static>>,
) -> Result<ClientConfig, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsSetupError(format!("a root certificate cannot be used: {e}")))?;
    }
    Ok(config_with_roots(roots))
}

/// The platform's roots (`rustls-native-certs`: `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` when set, else the system's store). Fails when none can
/// be loaded; certificates that cannot be parsed are skipped.
pub fn native_roots() -> Result<ClientConfig, TlsSetupError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(TlsSetupError(format!(
            "no trusted root certificate could be loaded from the platform{}: set SSL_CERT_FILE to a PEM bundle, \
             or build the transport with HyperTransport::with_tls_config",
            if why.is_empty() { String::new() } else { format!(" ({})", why.join("; ")) }
        )));
    }
    Ok(config_with_roots(roots))
}

/// Mozilla's roots, compiled in (feature `webpki-roots`).
#[cfg(feature = "webpki-roots")]
pub fn webpki_roots() -> ClientConfig {
    let roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    config_with_roots(roots)
}

/// Whether `e` (or a cause of it) is a TLS failure that no retry can fix:
/// a certificate the client does not trust, or a server it cannot talk to.
/// Returns the rustls error's text and what it means to do (see
/// [`what_to_do`]).
pub(crate) fn unfixable(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return permanent(tls).then(|| format!("{tls}: {}", what_to_do(tls)));
        }
        // tokio-rustls wraps the rustls error in an io::Error, and
        // hyper-rustls wraps that in another; an io::Error's `source()`
        // skips the error it wraps, so step into it.
        next = match err.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// How to make a test server's certificate that a client accepts: a CA,
/// and a leaf for the host signed by it (`basicConstraints=CA:FALSE`).
pub const LEAF_FROM_CA: &str = "openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj '/CN=test CA' -keyout ca.key -out ca.pem; \
openssl req -newkey rsa:2048 -nodes -subj '/CN=localhost' -keyout server.key -out server.csr; \
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > leaf.ext; \
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile leaf.ext -out server.pem";

/// What a permanent TLS failure means and what to do about it. A CA
/// certificate served as the server's own (what `openssl req -x509` makes
/// by default: `CA:TRUE`) is the server's to fix, not the client's trust.
fn what_to_do(e: &rustls::Error) -> String {
    let ca_as_leaf = matches!(e, rustls::Error::InvalidCertificate(rustls::CertificateError::Other(o))
        if format!("{o:?}").contains("CaUsedAsEndEntity"));
    if ca_as_leaf {
        return format!(
            "the server presents a CA certificate (basicConstraints CA:TRUE, as `openssl req -x509` makes by \
             default) as its own, and a server's certificate must be a leaf signed by a CA, so no client accepts \
             it and no retry can change that. Make a CA and a leaf for the host signed by it: {LEAF_FROM_CA}; \
             then serve server.pem with server.key, and trust ca.pem (SSL_CERT_FILE=ca.pem, or \
             tls::config_trusting)"
        );
    }
    "the server cannot be trusted or talked to by this client, and no retry can change that; trust its CA with \
     SSL_CERT_FILE or HyperTransport::with_tls_config"
        .to_owned()
}

fn permanent(e: &rustls::Error) -> bool {
    use rustls::Error as E;
    matches!(
        e,
        E::InvalidCertificate(_)
            | E::NoCertificatesPresented
            | E::UnsupportedNameType
            | E::PeerIncompatible(_)
            | E::InvalidCertRevocationList(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_error_is_found_inside_nested_io_errors() {
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, cert);
        let outer = std::io::Error::other(inner);
        let text = unfixable(&outer).expect("a certificate error");
        assert!(text.starts_with("invalid peer certificate: UnknownIssuer: "), "{text}");
        assert!(text.contains("SSL_CERT_FILE"), "{text}");
        // A handshake cut off is not a certificate: it may work next time.
        let cut = std::io::Error::other(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(unfixable(&cut), None);
        let alert = std::io::Error::other(rustls::Error::General("x".into()));
        assert_eq!(unfixable(&alert), None);
    }
}

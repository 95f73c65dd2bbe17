//! TLS for msgbench's own servers (the AMQP sink, the WebSocket broadcast server, the HTTP
//! server): one acceptor built from PEM files, shared by every connection.

use std::path::Path;
use std::sync::Arc;
/// The acceptor the servers take (re-exported so callers need no TLS crate of their own).
pub use tokio_rustls::TlsAcceptor;

/// Builds a TLS acceptor from PEM files: the certificate chain (leaf
/// first) and its private key (PKCS#8, PKCS#1 or SEC1). TLS 1.2 and 1.3, no client
/// certificates. Errors name the file and the cause.
pub fn tls_acceptor(cert_pem: &Path, key_pem: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    tls_acceptor_alpn(cert_pem, key_pem, &[])
}

/// [`tls_acceptor`] that also agrees by ALPN to the first of the client's `protocols` it
/// offers (an HTTP server: `h2`, then `http/1.1`).
pub fn tls_acceptor_alpn(
    cert_pem: &Path,
    key_pem: &Path,
    protocols: &[&[u8]],
) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let read_err = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        format!("cannot read {what} {}: {e}", path.display())
    };
    let chain = CertificateDer::pem_file_iter(cert_pem)
        .map_err(|e| read_err("certificate", cert_pem, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_err("certificate", cert_pem, &e))?;
    if chain.is_empty() {
        return Err(format!(
            "certificate file {} holds no PEM certificate",
            cert_pem.display()
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key_pem).map_err(|e| read_err("private key", key_pem, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("certificate {}: {e}", cert_pem.display()))?;
    config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

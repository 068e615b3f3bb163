//! TLS to the cluster, through the driver's rustls support (feature `tls`).
//!
//! The trust anchors are the CA certificates of `store.tls.ca_file` only (not the
//! system store: a cluster's certificates are usually issued by a private CA). A client
//! certificate is sent when `cert_file` and `key_file` are set. `verify_hostname = false`
//! still verifies the chain and validity dates, and skips only the name check, for
//! clusters whose node certificates do not name the addresses clients connect to.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::config::TlsConfig;

/// A rustls client configuration for `tls`, or a message naming the file or setting.
pub fn client_config(tls: &TlsConfig) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let ca_file = tls
        .ca_file
        .as_ref()
        .ok_or("store.tls.ca_file is required")?;
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| format!("store.tls.ca_file {}: {e}", ca_file.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("store.tls.ca_file {}: {e}", ca_file.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("store.tls.ca_file {}: {e}", ca_file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "store.tls.ca_file {}: no certificate found",
            ca_file.display()
        ));
    }
    let roots = Arc::new(roots);
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| format!("store.tls.ca_file: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if tls.verify_hostname {
        webpki
    } else {
        Arc::new(AnyName(webpki))
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert_file), Some(key_file)) => {
            let chain = CertificateDer::pem_file_iter(cert_file)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("store.tls.cert_file {}: {e}", cert_file.display()))?;
            let key = PrivateKeyDer::from_pem_file(key_file)
                .map_err(|e| format!("store.tls.key_file {}: {e}", key_file.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("store.tls.cert_file/key_file: {e}"))
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err("store.tls.cert_file and store.tls.key_file go together".into()),
    }
}

/// Verifies the chain like the default verifier but accepts any name in it.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

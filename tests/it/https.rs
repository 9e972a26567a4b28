//! `HyperTransport` over HTTPS: a local TLS server on 127.0.0.1
//! with a certificate made at test time (rcgen), strict about HTTP/1.1 as
//! `real_servers.rs`'s plain one is; a server the client does not trust;
//! and requests no retry can send. Each of the failures must end the
//! operation at its first attempt, not sent, with the reason.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use retrysim::core::classify::TransportFailure;
use retrysim::core::policy::{GiveUpReason, Policy};
use retrysim::env::{HyperTransport, TokioClock, Transport, seeded_rng};
use retrysim::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use retrysim::{RetryClient, tls};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A CA and a certificate for `localhost` and 127.0.0.1 signed by it.
struct Pki {
    ca: CertificateDer<'static>,
    leaf: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

fn pki() -> Pki {
    pki_named("retrysim test CA")
}

fn pki_named(ca_name: &str) -> Pki {
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    let ca_cert = ca.self_signed(&ca_key).expect("a self-signed CA");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("a server key");
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server parameters")
        .signed_by(&key, &issuer)
        .expect("a certificate signed by the CA");
    Pki {
        ca: ca_cert.der().clone(),
        leaf: leaf.der().clone(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    }
}

/// What the server saw of each request: its target, `Host`, and the
/// connection it came on (to see keep-alive).
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    host: Option<String>,
    connection: usize,
}

/// A TLS server on 127.0.0.1 that answers the first `refusals` requests
/// with Flask-Limiter's HTML 429 and `Retry-After: 0`, then 201. It refuses
/// (400) a request whose target is not in origin form or that has no `Host`.
async fn tls_server(pki: &Pki, refusals: usize) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let config = retrysim::rustls::ServerConfig::builder_with_provider(Arc::new(
        retrysim::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(vec![pki.leaf.clone()], pki.key.clone_key())
    .expect("the server's certificate and key");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port on loopback");
    let port = listener.local_addr().expect("an address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        // Bounded: a test makes a handful of connections.
        for connection in 0..64 {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, log) = (acceptor.clone(), log.clone());
            tokio::spawn(async move {
                // An untrusting client hangs up during the handshake.
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = service_fn(move |req: Request<Incoming>| {
                    let log = log.clone();
                    async move {
                        let target = req.uri().to_string();
                        let host =
                            req.headers().get(http::header::HOST).and_then(|h| h.to_str().ok()).map(str::to_owned);
                        let n = {
                            let mut log = log.lock().unwrap();
                            log.push(Seen { target: target.clone(), host: host.clone(), connection });
                            log.len()
                        };
                        let res = if !target.starts_with('/') || host.is_none() {
                            Response::builder()
                                .status(StatusCode::BAD_REQUEST)
                                .body(Full::new(Bytes::from("origin form and Host, please")))
                        } else if n <= refusals {
                            Response::builder()
                                .status(StatusCode::TOO_MANY_REQUESTS)
                                .header("retry-after", "0")
                                .header("content-type", "text/html; charset=utf-8")
                                .body(Full::new(Bytes::from("<h1>Too Many Requests</h1>")))
                        } else {
                            Response::builder()
                                .status(StatusCode::CREATED)
                                .body(Full::new(Bytes::from("{\"id\":\"job\"}")))
                        };
                        Ok::<_, Infallible>(res.expect("a valid response"))
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
            });
        }
    });
    (format!("https://localhost:{port}/v1/jobs"), seen)
}

fn post(url: &str) -> Request<Bytes> {
    Request::post(url).header("content-type", "application/json").body(Bytes::from("{}")).expect("a request")
}

#[tokio::test]
async fn the_driver_completes_jobs_over_https_with_strict_http_1_1() {
    let pki = pki();
    let (url, seen) = tls_server(&pki, 2).await;
    let config = tls::config_trusting([pki.ca.clone()]).expect("the test CA is a usable root");
    let client = RetryClient::new(TokioClock::real(), HyperTransport::with_tls_config(config), Policy::standard());
    let cancel = Default::default();
    let mut rng = seeded_rng(26);
    // Two refusals (Retry-After: 0), then the job; then a second job on
    // the same pool.
    let done = tokio::time::timeout(Duration::from_secs(20), client.execute(post(&url), &mut rng, &cancel))
        .await
        .expect("the job ends within 20 s")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.response.status(), done.attempts), (StatusCode::CREATED, 3));
    let again = client.execute(post(&url), &mut rng, &cancel).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.attempts, 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    let port = url.trim_start_matches("https://localhost:").split('/').next().unwrap().to_owned();
    for s in &seen {
        assert_eq!(s.target, "/v1/jobs", "origin form inside the tunnel: {seen:?}");
        assert_eq!(s.host.as_deref(), Some(format!("localhost:{port}").as_str()), "{seen:?}");
    }
    // Keep-alive: the retries and the next job reuse one connection.
    assert!(seen.iter().all(|s| s.connection == seen[0].connection), "one pooled connection: {seen:?}");
}

#[tokio::test]
async fn an_untrusted_certificate_ends_the_operation_at_once_not_sent() {
    let pki = pki();
    let (url, seen) = tls_server(&pki, 0).await;
    // A client that trusts another CA, not the one that signed the server's.
    let other = tls::config_trusting([pki_named("another CA").ca]).expect("another CA");
    let client = RetryClient::new(TokioClock::real(), HyperTransport::with_tls_config(other), Policy::background());
    let started = std::time::Instant::now();
    let e = client.execute(post(&url), &mut seeded_rng(1), &Default::default()).await.expect_err("untrusted");
    assert_eq!((e.reason.clone(), e.attempts, e.waited), (GiveUpReason::Unsendable, 1, Duration::ZERO), "{e}");
    let failure = e.last_failure.clone().expect("the transport's failure");
    assert_eq!(failure.failure, TransportFailure::Unsendable, "{failure}");
    assert!(failure.message.contains("invalid peer certificate: UnknownIssuer"), "{failure}");
    assert!(failure.message.contains("SSL_CERT_FILE"), "says how to trust it: {failure}");
    // The guide shows this error as it is.
    let shown = e.to_string();
    assert!(shown.contains("nothing was sent"), "{e}");
    assert!(
        crate::readme::PAGES.iter().any(|(page, text)| page.ends_with("driver.md") && text.contains(&shown)),
        "{shown}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "no waiting: {:?}", started.elapsed());
    // The platform's roots (whatever this machine has) do not hold the test
    // CA either: unsendable at once, for the certificate or for no roots.
    let platform = RetryClient::new(TokioClock::real(), HyperTransport::new(), Policy::background());
    let e = platform.execute(post(&url), &mut seeded_rng(1), &Default::default()).await.expect_err("untrusted");
    assert_eq!((e.reason.clone(), e.attempts), (GiveUpReason::Unsendable, 1), "{e}");
    assert!(seen.lock().unwrap().is_empty(), "no request reached the server");
    // The negative control: trusting the CA, the same server answers.
    let trusted = HyperTransport::with_tls_config(tls::config_trusting([pki.ca.clone()]).unwrap());
    assert_eq!(trusted.send(post(&url)).await.expect("trusted").status(), StatusCode::CREATED);
}

#[tokio::test]
async fn a_request_no_retry_can_send_ends_at_the_first_attempt() {
    let client = RetryClient::new(TokioClock::real(), HyperTransport::new(), Policy::background());
    for (url, why) in [("ftp://127.0.0.1:9/v1/jobs", "not ftp://"), ("/v1/jobs", "has no host")] {
        let e = client.execute(post(url), &mut seeded_rng(1), &Default::default()).await.expect_err(url);
        assert_eq!(
            (e.reason.clone(), e.attempts, e.waited),
            (GiveUpReason::Unsendable, 1, Duration::ZERO),
            "{url}: {e}"
        );
        let failure = e.last_failure.expect("a failure");
        assert_eq!(failure.failure, TransportFailure::Unsendable, "{url}");
        assert!(failure.message.contains(why), "{url}: {failure}");
    }
    // A refused connection is not that: it may work next time, and is retried.
    let quick = Policy::interactive().to_builder().max_retries(1).build();
    let client = RetryClient::new(TokioClock::real(), HyperTransport::new(), quick);
    let e = client.execute(post("https://127.0.0.1:9/v1/jobs"), &mut seeded_rng(1), &Default::default()).await;
    let e = e.expect_err("nothing listens on port 9");
    assert_eq!((e.reason.kind(), e.attempts), ("attempts_exhausted", 2), "{e}");
    assert_eq!(e.last_failure.expect("a failure").failure, TransportFailure::NotSent);
}

#[test]
fn a_plain_client_names_what_https_needs() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let plain = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(hyper_util::client::legacy::connect::HttpConnector::new());
        let e = HyperTransport::from_client(plain).send(post("https://localhost:9/")).await.expect_err("plain");
        assert_eq!(e.failure, TransportFailure::Unsendable);
        assert!(e.message.contains("with_tls_config"), "{e}");
    });
}

/// What `openssl req -x509` makes: one self-signed certificate for the host,
/// marked CA:TRUE, served as the server's own.
fn ca_as_leaf() -> Pki {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).expect("a self-signed certificate");
    Pki {
        ca: cert.der().clone(),
        leaf: cert.der().clone(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    }
}

#[tokio::test]
async fn a_ca_certificate_served_as_the_servers_own_says_what_that_means_and_how_to_make_a_leaf() {
    let ca = ca_as_leaf();
    let (url, seen) = tls_server(&ca, 0).await;
    // Even a client that trusts that very certificate refuses it.
    let config = tls::config_trusting([ca.ca.clone()]).expect("a usable root");
    let client = RetryClient::new(TokioClock::real(), HyperTransport::with_tls_config(config), Policy::background());
    let e = client.execute(post(&url), &mut seeded_rng(1), &Default::default()).await.expect_err("a CA as a leaf");
    assert_eq!((e.reason.clone(), e.attempts), (GiveUpReason::Unsendable, 1), "{e}");
    let failure = e.last_failure.expect("the transport's failure").message;
    assert!(failure.contains("CaUsedAsEndEntity"), "the error as rustls gives it: {failure}");
    assert!(failure.contains("presents a CA certificate (basicConstraints CA:TRUE"), "what it means: {failure}");
    assert!(failure.contains(tls::LEAF_FROM_CA), "how to make a leaf: {failure}");
    assert!(!failure.contains("trust its CA with"), "trusting it more does not help: {failure}");
    assert!(seen.lock().unwrap().is_empty(), "no request reached the server");
    // The negative control: the usual leaf signed by a CA is served and answers.
    let pki = pki();
    let (url, _) = tls_server(&pki, 0).await;
    let trusted = HyperTransport::with_tls_config(tls::config_trusting([pki.ca.clone()]).unwrap());
    assert_eq!(trusted.send(post(&url)).await.expect("a leaf signed by the CA").status(), StatusCode::CREATED);
}

//! The download engine against a server that misbehaves on cue.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::{assert_installed, make_archive, ok, run, Env, Fault, Server};

#[test]
fn dropped_connection_resumes_with_a_range_request() {
    let env = Env::new();
    let archives = env.rocrand(2_000_000);
    let a = &archives[0];
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    server.push_fault(&a.by_hash(), Fault::DropAfter(700_000));
    let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &[]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), a);
    let reqs = server.requests_for(&a.by_hash());
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0].range, None);
    assert_eq!(
        reqs[1].range.as_deref(),
        Some("bytes=700000-"),
        "resumed where the drop happened"
    );
    assert_eq!(reqs[1].status, 206);
    assert!(stderr.contains("retrying"), "{stderr}");
}

#[test]
fn wrong_bytes_are_rejected_with_both_hashes_and_nothing_installed() {
    let env = Env::new();
    let archives = env.rocrand(300_000);
    let a = &archives[0];
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    server.set_fault(&a.by_hash(), Fault::WrongBytes);
    let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &["--json"]));
    assert_eq!(code, 1, "{stderr}");
    let flipped: Vec<u8> = a.bytes.iter().map(|b| b ^ 0x5a).collect();
    let actual = hex::encode(Sha256::digest(&flipped));
    // stderr: the cause per host, once; --json: the error in full.
    assert!(
        stderr.contains("sha256 mismatch (damaged or wrong file) (1 archive)"),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let error = json["failed"][0]["error"].as_str().expect("error");
    assert!(error.contains(&format!("expected {}", a.hex())), "{error}");
    assert!(error.contains(&format!("got {actual}")), "{error}");
    // Nothing installed, nothing recorded, no lock file left.
    assert_eq!(env.kpack_files(), ["rocrand.kpm"]);
    assert!(
        env.partials().is_empty(),
        "bad bytes are not kept: {:?}",
        env.partials()
    );
}

#[test]
fn not_found_on_one_mirror_moves_to_the_next() {
    let env = Env::new();
    let archives = env.rocrand(100_000);
    let a = &archives[1];
    let empty = Server::start();
    empty.set_fault("*", Fault::NotFound);
    let good = Server::start();
    good.add(&a.by_name(), a.bytes.clone());
    ok(env.install("gfx1100", &[empty.url(), good.url()], &[]));
    assert_installed(&env.kpack.join("rocrand_gfx110X.kpack"), a);
    let tried: Vec<String> = empty.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        tried,
        [a.by_hash(), a.by_name()],
        "both layouts tried on the first mirror, no retries"
    );
    assert_eq!(
        good.requests().len(),
        2,
        "second mirror: by-hash 404, then by name"
    );
}

#[test]
fn retry_after_on_503_is_honoured() {
    let env = Env::new();
    let archives = env.rocrand(50_000);
    let a = &archives[0];
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    server.push_fault(&a.by_hash(), Fault::Status(503, Some("1".into())));
    let start = Instant::now();
    let (code, _, stderr) = run(env.install("gfx90a", &[server.url()], &[]));
    let elapsed = start.elapsed();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        elapsed >= Duration::from_secs(1),
        "waited only {elapsed:?} (backoff base is 20 ms)"
    );
    assert!(
        stderr.contains("HTTP 503") && stderr.contains("retrying in 1.0s"),
        "{stderr}"
    );
    assert_eq!(server.requests_for(&a.by_hash()).len(), 2);
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), a);
}

#[test]
fn persistent_5xx_gives_up_with_url_and_retries_in_the_error() {
    let env = Env::new();
    let archives = env.rocrand(5_000);
    let a = &archives[0];
    let server = Server::start();
    server.set_fault("*", Fault::Status(502, None));
    let (code, stdout, stderr) =
        run(env.install("gfx90a", &[server.url()], &["--retries", "2", "--json"]));
    assert_eq!(code, 1, "{stderr}");
    let url = format!("{}{}", server.url(), a.by_hash());
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let error = json["failed"][0]["error"].as_str().expect("error");
    assert!(
        error.contains(&format!("{url}: HTTP 502 (after 2 retries)")),
        "{error}"
    );
    // stderr sums it up per host, as apt does: no URLs, no hashes.
    let host = server
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let host = host.split('/').next().expect("host").to_string();
    assert!(
        stderr.contains(&format!("  {host}: HTTP 502 (1 archive)")),
        "{stderr}"
    );
    assert!(!stderr.contains(&a.hex()), "{stderr}");
    assert_eq!(server.requests().len(), 6, "3 tries for each of the 2 URLs");
}

#[test]
fn stalled_body_times_out_and_the_partial_is_kept_for_resuming() {
    let env = Env::new();
    let archives = env.rocrand(3_000_000);
    let a = &archives[0];
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    // The first response stalls after 1.5 MB; later ones send nothing.
    // (A retry that makes progress earns fresh retries, so a server that
    // keeps sending a little each time still completes the file.)
    server.push_fault(
        &a.by_hash(),
        Fault::StallAfter(1_500_000, Duration::from_secs(20)),
    );
    server.set_fault(&a.by_hash(), Fault::StallAfter(0, Duration::from_secs(20)));
    let start = Instant::now();
    let (code, _, stderr) = run(env.install(
        "gfx90a",
        &[server.url()],
        &["--read-timeout", "0.5", "--retries", "1"],
    ));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        stderr.contains("timed out: no data for 0.5s (after 1 retry)"),
        "{stderr}"
    );
    assert!(!env.kpack.join("rocrand_gfx90X.kpack").exists());
    let partials = env.partials();
    assert_eq!(partials.len(), 1, "{partials:?}");
    assert_eq!(partials[0].0, format!("{}.part", a.hex()));
    assert_eq!(partials[0].1, 1_500_000, "bytes before the stall are kept");

    // Next run resumes from there.
    server.clear_faults();
    ok(env.install("gfx90a", &[server.url()], &[]));
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), a);
    let last = server.requests_for(&a.by_hash()).pop().expect("request");
    assert_eq!(last.range.as_deref(), Some("bytes=1500000-"));
    assert!(env.partials().is_empty());
}

#[test]
fn oversize_bodies_are_cut_at_the_manifest_size() {
    for fault in [Fault::Oversize(1 << 20), Fault::OversizeAnnounced(1 << 20)] {
        let env = Env::new();
        let archives = env.rocrand(100_000);
        let a = &archives[0];
        let server = Server::start();
        server.add(&a.by_hash(), a.bytes.clone());
        server.set_fault(&a.by_hash(), fault.clone());
        let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &["--json"]));
        assert_eq!(code, 1, "{fault:?}: {stderr}");
        assert!(
            stderr.contains("sent more bytes than the manifest says (1 archive)"),
            "{fault:?}: {stderr}"
        );
        let msg = format!(
            "more data than the manifest's {} bytes; download cut off",
            a.bytes.len()
        );
        assert!(stdout.contains(&msg), "{fault:?}: {stdout}");
        assert!(!env.kpack.join("rocrand_gfx90X.kpack").exists());
        assert!(env.partials().is_empty(), "{fault:?}: {:?}", env.partials());
        // Not retried: more bytes will not become fewer.
        assert_eq!(server.requests_for(&a.by_hash()).len(), 1, "{fault:?}");
    }
}

#[test]
fn redirects_go_only_to_https_or_loopback() {
    let env = Env::new();
    let a = make_archive("rocrand", "gfx90X", &["gfx90a"], 20_000, 21);
    env.manifest(&env.kpack, "rocrand", &[&a]);
    let server = Server::start();
    server.add("/real/blob", a.bytes.clone());
    server.push_fault(
        &a.by_hash(),
        Fault::Redirect(format!("{}/real/blob", server.url())),
    );
    ok(env.install("gfx90a", &[server.url()], &[]));
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), &a);

    let env = Env::new();
    env.manifest(&env.kpack, "rocrand", &[&a]);
    server.set_fault("*", Fault::Redirect("http://mirror.invalid/blob".into()));
    let (code, _, stderr) = run(env.install("gfx90a", &[server.url()], &[]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("refusing redirect to http://mirror.invalid/blob"),
        "{stderr}"
    );
}

#[test]
fn credentials_in_source_urls_are_masked() {
    let env = Env::new();
    let archives = env.rocrand(5_000);
    let server = Server::start();
    server.set_fault("*", Fault::NotFound);
    let url = server.url().replace("http://", "http://alice:hunter2@");
    let (code, stdout, stderr) = run(env.install("gfx90a", &[url], &["--json"]));
    assert_eq!(code, 1);
    assert!(
        !stderr.contains("hunter2") && !stdout.contains("hunter2"),
        "{stderr}"
    );
    assert!(stdout.contains("http://****@127.0.0.1"), "{stdout}");
    assert!(stdout.contains(&archives[0].hex()));
}

#[test]
fn network_failures_are_summed_up_per_host() {
    let env = Env::new();
    env.rocrand(5_000);
    // A name that never resolves (RFC 6761) and a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let sources = [
        "https://mirror.invalid/kpack/".to_string(),
        format!("http://127.0.0.1:{port}/kpack/"),
    ];
    let (code, _, stderr) = run(env.install("gfx90a,gfx1100", &sources, &["--retries", "1"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("2 archives could not be installed:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  mirror.invalid: cannot resolve the host name (2 archives)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "  127.0.0.1:{port}: connection refused (2 archives)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("then run the same command again"),
        "{stderr}"
    );
    // Each cause once per host in the progress lines too; no URLs or hashes.
    assert_eq!(
        stderr
            .matches("mirror.invalid: cannot resolve the host name")
            .count(),
        2,
        "{stderr}"
    );
    assert!(
        !stderr.contains("by-hash") && !stderr.contains("sha256/"),
        "{stderr}"
    );
    assert!(stderr.lines().count() <= 10, "{stderr}");
}

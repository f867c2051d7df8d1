//! `forkprof monitor --listen ADDR:PORT`: system-wide live metrics at /metrics.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use axum::{
    Router,
    http::{HeaderMap, header},
    response::IntoResponse,
    routing::get,
};

use crate::cli::MonitorArgs;
use crate::output::prometheus::Metrics;
use crate::session::{self, LiveSession, Stop, StopSignals};

/// How often finished processes are folded into the metrics.
const UPDATE_EVERY: Duration = Duration::from_millis(500);

pub fn run(args: MonitorArgs) -> Result<i32> {
    let scope = match crate::cgroups::CgroupScope::from_arg(args.cgroup.as_deref()) {
        Ok(scope) => scope,
        Err(why) => {
            eprintln!("forkprof: {why}");
            return Ok(2);
        }
    };
    let runtime = session::runtime()?;
    let _in_runtime = runtime.enter();
    // Bind first: a bad or busy address is reported before anything is loaded.
    let listener = match runtime.block_on(tokio::net::TcpListener::bind(&args.listen)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("forkprof: cannot listen on {}: {e}", args.listen);
            return Ok(1);
        }
    };
    let local = listener.local_addr().ok();
    let mut session = LiveSession::start_in(scope.as_ref(), true, args.hooks.ia32_syscalls())?;
    // A scope's cgroup that is removed leaves the metrics as they are (said once on stderr):
    // a scrape keeps working, and nothing new is counted.
    let mut said_gone = false;
    let metrics = Arc::new(Mutex::new(Metrics::new(
        args.top_binaries,
        args.top_cgroups,
    )));
    let served = metrics.clone();
    let app = Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let m = served.clone();
            async move {
                let accept = headers
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let body = m
                    .lock()
                    .map(|m| m.encode_for(&accept))
                    .unwrap_or(Err(std::fmt::Error));
                match body {
                    Ok((text, kind)) => ([(header::CONTENT_TYPE, kind)], text).into_response(),
                    Err(_) => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        "encoding failed",
                    )
                        .into_response(),
                }
            }
        }),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut server_stop = stop_rx.clone();
    let server = runtime.spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = server_stop.changed().await;
            })
            .await
    });
    // The address bound: with port 0, the one the kernel chose.
    let bound = local.map_or_else(|| args.listen.clone(), |a| a.to_string());
    // The handlers first: whoever reads the line below may stop the agent at once.
    let mut signals = StopSignals::new()?;
    eprintln!("forkprof: serving metrics at http://{bound}/metrics");
    loop {
        let stop = runtime.block_on(session.run_until(signals.or_after(Some(UPDATE_EVERY))))?;
        let sweep = session.sweep()?;
        {
            let mut m = metrics.lock().expect("metrics lock");
            m.observe(&sweep.done);
            m.update(&sweep.counters, sweep.lost, sweep.in_flight);
        }
        if stop == Stop::Signal {
            break;
        }
        if let Some(scope) = scope.as_ref().filter(|s| !said_gone && s.is_gone()) {
            eprintln!(
                "{}",
                scope.gone_message(
                    "the metrics stay served as they are, and nothing new is counted"
                )
            );
            said_gone = true;
        }
    }
    let _ = stop_tx.send(true);
    runtime
        .block_on(server)
        .context("metrics server")?
        .context("metrics server")?;
    Ok(0)
}

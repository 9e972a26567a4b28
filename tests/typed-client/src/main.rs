//! async-openai 0.43, unchanged, sending chat completions to an
//! OpenAI-like API at a base URL: `typed-client --url URL [--jobs N]
//! [--workers W]`. Each job is one `client.chat().create(..)` with its own
//! prompt (so the server tells jobs apart by their bodies); the client
//! retries as it does by default. It prints one JSON line: jobs done, jobs
//! failed and why (the error's first words), and the wall time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs};

struct Args {
    url: String,
    jobs: usize,
    workers: usize,
}

fn args() -> Result<Args, String> {
    let mut out = Args { url: String::new(), jobs: 40, workers: 4 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|_| format!("{flag} {value:?} is not a whole number"));
        match flag.as_str() {
            "--url" => out.url = value.clone(),
            "--jobs" => out.jobs = number()?,
            "--workers" => out.workers = number()?.max(1),
            _ => return Err(format!("unknown flag {flag}: use --url URL [--jobs N] [--workers W]")),
        }
    }
    if !out.url.starts_with("http://") {
        return Err("--url must be the server's http:// URL (retrysim serve prints it)".into());
    }
    Ok(out)
}

/// One job: a chat completion whose prompt names the job.
async fn job(client: &Client<OpenAIConfig>, n: usize) -> Result<String, String> {
    let message = ChatCompletionRequestUserMessageArgs::default()
        .content(format!("job {n}"))
        .build()
        .map_err(|e| e.to_string())?;
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-4o-mini")
        .messages([message.into()])
        .build()
        .map_err(|e| e.to_string())?;
    let answer = client.chat().create(request).await.map_err(|e| e.to_string())?;
    Ok(answer.id)
}

#[tokio::main]
async fn main() {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("typed-client: {e}");
            std::process::exit(2);
        }
    };
    // The only change from production: the base URL (and a key the
    // simulated API knows).
    let config = OpenAIConfig::new().with_api_base(format!("{}/v1", args.url)).with_api_key("key-a");
    let client = Client::with_config(config);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        let (client, next, jobs) = (client.clone(), next.clone(), args.jobs);
        workers.push(tokio::spawn(async move {
            let mut ends = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= jobs {
                    return ends;
                }
                ends.push(job(&client, n).await);
            }
        }));
    }
    let (mut succeeded, mut failed) = (0, BTreeMap::<String, usize>::new());
    for w in workers {
        for end in w.await.expect("a worker panicked") {
            match end {
                Ok(_) => succeeded += 1,
                Err(e) => *failed.entry(e.chars().take(60).collect()).or_default() += 1,
            }
        }
    }
    let lost: usize = failed.values().sum();
    let report = serde_json::json!({
        "client": "async-openai 0.43.0",
        "jobs": args.jobs,
        "succeeded": succeeded,
        "failed": lost,
        "errors": failed,
        "elapsed_ms": started.elapsed().as_millis() as u64,
    });
    println!("{report}");
}

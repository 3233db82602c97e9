//! `saint-operator`: reconciles SaintBot, Contact and Role resources into per-bot pods,
//! config, storage, permissions and network fences. Parses flags, elects a leader,
//! serves health and metrics, and drains on SIGTERM.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use futures::FutureExt;
use saint_config::ErrorChain;
use saint_operator::{
    api_server, cache, leader::LeaseLock, metrics::Metrics, references_controller,
    saintbot_controller, settings::OperatorSettings, web,
};
use tokio::sync::watch;

/// jemalloc returns freed memory to the system within seconds (glibc's malloc keeps
/// most of what the initial lists of a large fleet needed, so resident memory stayed at
/// that peak), and fragments less under many small, long-lived cached objects.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How often the heap gauges are refreshed from the allocator's statistics.
const HEAP_STATS_INTERVAL: Duration = Duration::from_secs(2);

/// Keeps `saint_operator_heap_{allocated,resident}_bytes` current.
async fn report_heap(metrics: Arc<Metrics>) {
    use tikv_jemalloc_ctl::{epoch, stats};
    let mut interval = tokio::time::interval(HEAP_STATS_INTERVAL);
    loop {
        interval.tick().await;
        // jemalloc's statistics are a snapshot taken when the epoch advances.
        let read = epoch::advance()
            .and_then(|_| Ok((stats::allocated::read()?, stats::resident::read()?)));
        match read {
            Ok((allocated, resident)) => {
                metrics.heap_allocated.set(allocated as i64);
                metrics.heap_resident.set(resident as i64);
            }
            Err(error) => {
                tracing::warn!(%error, "failed to read the allocator's statistics; heap gauges stop");
                return;
            }
        }
    }
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Kubernetes operator for Saint bots (SaintBot, Contact and Role in saint.work/v1alpha1).
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Arguments {
    /// Default image of the bot's `agent` container.
    #[arg(long, env = "SAINT_AGENT_IMAGE", default_value_t = format!("ghcr.io/saint-work/saint-agent:{VERSION}"))]
    agent_image: String,
    /// Default image of the bot's `porter` container.
    #[arg(long, env = "SAINT_PORTER_IMAGE", default_value_t = format!("ghcr.io/saint-work/saint-porter:{VERSION}"))]
    porter_image: String,
    /// Default image of sandbox pods.
    #[arg(long, env = "SAINT_SANDBOX_IMAGE", default_value_t = format!("ghcr.io/saint-work/saint-sandbox:{VERSION}"))]
    sandbox_image: String,
    /// Watch only this namespace. Absent: every namespace (needs cluster-wide RBAC).
    #[arg(long, env = "SAINT_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Address of the /healthz, /readyz and /metrics endpoints.
    #[arg(long, env = "SAINT_LISTEN_ADDRESS", default_value = "0.0.0.0:8080")]
    listen_address: SocketAddr,
    /// Elect a leader through a Lease so several replicas are safe (`false`: always lead).
    #[arg(long, env = "SAINT_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "SAINT_LEASE_NAME", default_value = "saint-operator")]
    lease_name: String,
    /// Namespace of the Lease. Absent: the operator's own namespace (POD_NAMESPACE or the
    /// service-account namespace file), else `default`.
    #[arg(long, env = "SAINT_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Seconds a Lease stays valid without renewal (renewed every third of it).
    #[arg(long, env = "SAINT_LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=300))]
    lease_duration_seconds: u64,
    /// This replica's identity in the Lease. Absent: POD_NAME, else the host name.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// CIDR of an API server endpoint the bot pods may reach (repeat or comma-separate).
    /// Absent: discovered from the `default/kubernetes` EndpointSlices at start-up.
    #[arg(
        long = "api-server-cidr",
        env = "SAINT_API_SERVER_CIDRS",
        value_delimiter = ','
    )]
    api_server_cidrs: Vec<String>,
    /// Port of the API server endpoints (used with --api-server-cidr).
    #[arg(long, env = "SAINT_API_SERVER_PORT", default_value_t = 6443)]
    api_server_port: i32,
    /// ClusterRole bound to each bot's agent account in its namespace (the chart creates
    /// it; the operator needs only `bind` on it).
    #[arg(long, env = "SAINT_AGENT_CLUSTER_ROLE", default_value = saint_operator::settings::DEFAULT_AGENT_CLUSTER_ROLE)]
    agent_cluster_role: String,
    /// The shared embedder Service, `<namespace>/<service>:<port>` (the chart sets it
    /// when it deploys one). Bots with `spec.memory.embedder: shared` use it; without
    /// this flag such bots are refused with a condition saying so.
    #[arg(long, env = "SAINT_SHARED_EMBEDDER", value_parser = saint_operator::settings::SharedEmbedder::parse)]
    shared_embedder: Option<saint_operator::settings::SharedEmbedder>,
    /// How the shared embedder's model holds its weights (`f32` or `int16`, as the chart's
    /// `embedder.weights`); bots record it with their vectors.
    #[arg(long, env = "SAINT_SHARED_EMBEDDER_WEIGHTS", default_value = "f32", value_parser = saint_operator::settings::SharedEmbedder::parse_weights)]
    shared_embedder_weights: saint_config::ModelWeights,
    /// An annotation bots may put on their webhook Ingress (`spec.webhookIngress.
    /// annotations`): an exact key, or `prefix/*` (repeat or comma-separate; the chart's
    /// `webhookIngress.allowedAnnotations`). Any other is refused naming it. Absent: none.
    #[arg(
        long = "allowed-ingress-annotation",
        env = "SAINT_ALLOWED_INGRESS_ANNOTATIONS",
        value_delimiter = ','
    )]
    allowed_ingress_annotations: Vec<String>,
    /// Reconciles run at once, per controller (SaintBots; Contacts and Roles). Bounds
    /// the operator's memory and its load on the API server on a large fleet.
    #[arg(long, env = "SAINT_MAX_CONCURRENT_RECONCILES", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    max_concurrent_reconciles: u16,
}

fn own_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|namespace| !namespace.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|text| text.trim().to_string())
        })
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| "saint-operator".to_string())
}

/// Resolves when SIGTERM or Ctrl-C arrives.
async fn termination() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler installs");
    tokio::select! {
        _ = terminate.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// The controllers the leader runs: SaintBots, and the Contacts and Roles they refer to.
#[derive(Clone)]
struct Controllers {
    client: kube::Client,
    settings: OperatorSettings,
    metrics: Arc<Metrics>,
    namespace: Option<String>,
    concurrency: u16,
}

impl Controllers {
    /// Watches the cluster, waits until every cache has listed once (a bot reconciled
    /// against a half-filled cache would render without some of its Contacts), then
    /// runs every controller until `stop` resolves. Each leadership term starts afresh.
    async fn run(&self, stop: impl std::future::Future<Output = ()> + Send + 'static) {
        let stop = stop.boxed().shared();
        let caches = cache::caches(&self.client, self.namespace.as_deref());
        let drivers: Vec<_> = caches.drivers.into_iter().map(tokio::spawn).collect();
        let started = std::time::Instant::now();
        let synced = async {
            caches.sources.wait_until_ready().await?;
            caches.children.wait_until_ready().await
        };
        tokio::select! {
            result = synced => {
                if result.is_err() {
                    tracing::error!("a cache stopped before it listed; not reconciling");
                    return;
                }
            }
            _ = stop.clone() => {
                drivers.iter().for_each(tokio::task::JoinHandle::abort);
                return;
            }
        }
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            bots = caches.sources.bots.state().len(),
            contacts = caches.sources.contacts.state().len(),
            roles = caches.sources.roles.state().len(),
            "caches listed; reconciling"
        );
        let bots = Arc::new(saintbot_controller::Context::new(
            self.client.clone(),
            self.settings.clone(),
            self.metrics.clone(),
            caches.sources.clone(),
            caches.children,
        ));
        let references = Arc::new(references_controller::Context::new(
            self.client.clone(),
            caches.sources,
        ));
        futures::join!(
            saintbot_controller::run(bots, caches.bot_feeds, self.concurrency, stop.clone()),
            references_controller::run(references, caches.reference_feeds, self.concurrency, stop),
        );
        drivers.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

async fn wait_for(receiver: &mut watch::Receiver<bool>, wanted: bool) {
    // An error means the sender is gone; treat it as the state we wait for to end the wait.
    let _ = receiver.wait_for(|value| *value == wanted).await;
}

#[tokio::main]
async fn main() {
    let arguments = Arguments::parse();
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    if let Err(error) = run(arguments).await {
        eprintln!("saint-operator: {error:#}");
        std::process::exit(1);
    }
}

/// The API client, counting every request it sends in `requests` (the fleet benchmark
/// and dashboards read API requests per reconcile from it).
async fn counting_client(
    requests: prometheus_client::metrics::counter::Counter,
) -> anyhow::Result<kube::Client> {
    let config = kube::Config::infer()
        .await
        .context("failed to configure the Kubernetes client")?;
    let count =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            requests.inc();
            tracing::trace!(method = %request.method(), uri = %request.uri(), "API request");
            request
        });
    Ok(kube::client::ClientBuilder::try_from(config)
        .context("failed to configure the Kubernetes client")?
        .with_layer(&count)
        .build())
}

async fn run(arguments: Arguments) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::default());
    let client = counting_client(metrics.api_requests.clone()).await?;
    let version = client
        .apiserver_version()
        .await
        .context("failed to reach the Kubernetes API server")?;
    tracing::info!(version = %version.git_version, "connected to the API server");

    let api_server = api_server_route(&arguments, &client).await;
    let settings = operator_settings(&arguments, api_server);
    tracing::info!(?settings, namespace = ?arguments.namespace, "starting");

    let ready = Arc::new(AtomicBool::new(true));
    tokio::spawn(report_heap(metrics.clone()));
    let shutdown = shutdown_on_termination();

    let listener = tokio::net::TcpListener::bind(arguments.listen_address)
        .await
        .with_context(|| format!("failed to listen on {}", arguments.listen_address))?;
    let web_state = web::WebState {
        metrics: metrics.clone(),
        ready,
    };
    let mut web_shutdown = shutdown.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, web::app(web_state))
            .with_graceful_shutdown(async move { wait_for(&mut web_shutdown, true).await })
            .await
    });

    let controllers = Controllers {
        client: client.clone(),
        settings,
        metrics,
        namespace: arguments.namespace.clone(),
        concurrency: arguments.max_concurrent_reconciles,
    };
    if arguments.leader_election {
        lead_while_elected(&arguments, client, &controllers, &shutdown).await;
    } else {
        let mut stop = shutdown.clone();
        controllers
            .run(async move { wait_for(&mut stop, true).await })
            .await;
    }
    server
        .await
        .context("web server task failed")?
        .context("web server failed")?;
    tracing::info!("stopped");
    Ok(())
}

/// Where bot pods reach the API server: the addresses given, else the `kubernetes`
/// Service's endpoints.
struct ApiServerRoute {
    cidrs: Vec<String>,
    port: i32,
}

async fn api_server_route(arguments: &Arguments, client: &kube::Client) -> ApiServerRoute {
    let mut route = ApiServerRoute {
        cidrs: arguments.api_server_cidrs.clone(),
        port: arguments.api_server_port,
    };
    if !route.cidrs.is_empty() {
        return route;
    }
    match api_server::discover(client).await {
        Ok((cidrs, _)) if cidrs.is_empty() => {
            tracing::warn!(
                "found no API server endpoints; bot pods get no API egress rule (set --api-server-cidr)"
            )
        }
        Ok((cidrs, port)) => {
            route.cidrs = cidrs;
            route.port = port.unwrap_or(route.port);
        }
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "failed to discover API server endpoints; bot pods get no API egress rule")
        }
    }
    route
}

fn operator_settings(arguments: &Arguments, api_server: ApiServerRoute) -> OperatorSettings {
    OperatorSettings {
        agent_image: arguments.agent_image.clone(),
        porter_image: arguments.porter_image.clone(),
        sandbox_image: arguments.sandbox_image.clone(),
        api_server_cidrs: api_server.cidrs,
        api_server_port: api_server.port,
        agent_cluster_role: arguments.agent_cluster_role.clone(),
        shared_embedder: arguments.shared_embedder.clone().map(|embedder| {
            saint_operator::settings::SharedEmbedder {
                weights: arguments.shared_embedder_weights,
                ..embedder
            }
        }),
        allowed_ingress_annotations: arguments.allowed_ingress_annotations.clone(),
    }
}

/// Turns true when SIGTERM (or Ctrl-C) arrives.
fn shutdown_on_termination() -> watch::Receiver<bool> {
    let (shutdown_sender, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        termination().await;
        tracing::info!("termination requested; draining");
        shutdown_sender.send_replace(true);
    });
    shutdown
}

/// Runs the controllers whenever this replica holds the Lease, until shutdown; then
/// releases the Lease so another replica takes over at once.
async fn lead_while_elected(
    arguments: &Arguments,
    client: kube::Client,
    controllers: &Controllers,
    shutdown: &watch::Receiver<bool>,
) {
    let lease_namespace = arguments
        .lease_namespace
        .clone()
        .or_else(own_namespace)
        .unwrap_or_else(|| "default".to_string());
    let identity = arguments.identity.clone().unwrap_or_else(host_name);
    let duration = Duration::from_secs(arguments.lease_duration_seconds);
    let lock = Arc::new(LeaseLock::new(
        client,
        &lease_namespace,
        &arguments.lease_name,
        &identity,
        duration,
    ));
    let (leading_sender, mut leading) = watch::channel(false);
    let elector = tokio::spawn({
        let lock = lock.clone();
        async move { lock.run(duration / 3, leading_sender).await }
    });
    let mut shutdown_watch = shutdown.clone();
    loop {
        tokio::select! {
            _ = wait_for(&mut leading, true) => {},
            _ = wait_for(&mut shutdown_watch, true) => break,
        }
        tracing::info!(%identity, "leading; starting the controller");
        let mut lost = leading.clone();
        let mut stop = shutdown.clone();
        // Losing the Lease stops reconciling at once; another replica may lead now.
        controllers
            .run(async move {
                tokio::select! {
                    _ = wait_for(&mut lost, false) => {},
                    _ = wait_for(&mut stop, true) => {},
                }
            })
            .await;
        if *shutdown.borrow() {
            break;
        }
        tracing::warn!(%identity, "lost the Lease; controller stopped");
    }
    elector.abort();
    if let Err(error) = lock.release().await {
        tracing::warn!(error = %ErrorChain(&error), "failed to release the Lease");
    }
}

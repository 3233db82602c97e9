//! Semantic checks serde cannot express. Pure: no I/O.

use std::collections::BTreeMap;

use crate::{
    BOOTSTRAP_FILES, BotConfig, ChannelIdentity, ContactSlug, KNOWN_TOOLS, MAX_RUNNING_PROCESSES,
    SCHEMA_VERSION, SandboxBackend, TOOL_GROUPS, TOP_UP_TOOL, UnpricedModels, mcp,
};

/// Why a rendered config was refused. Each message names the offending field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to parse bot config")]
    Parse(#[source] serde_json::Error),
    #[error("schemaVersion is {found:?}, this agent reads {SCHEMA_VERSION:?}")]
    SchemaVersion { found: String },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Whether `pattern` is a known tool, a known `group:*`, a glob that matches a known
/// tool, or an MCP server's tool pattern (`docs.search`, `docs.*`).
pub fn is_known_tool_pattern(pattern: &str) -> bool {
    if pattern.contains('.') {
        return mcp::is_server_tool_pattern(pattern);
    }
    if let Some(group) = pattern.strip_prefix("group:") {
        return TOOL_GROUPS.iter().any(|(name, _)| *name == group);
    }
    if pattern.contains(['*', '?', '[']) {
        return match globset::Glob::new(pattern) {
            Ok(glob) => {
                let matcher = glob.compile_matcher();
                KNOWN_TOOLS.iter().any(|tool| matcher.is_match(tool))
            }
            Err(_) => false,
        };
    }
    KNOWN_TOOLS.contains(&pattern)
}

/// Why a memory scope is refused: it reaches `file`, which the read rules in
/// `read_field` refuse (shared by the agent's and the operator's checks).
pub fn memory_scope_message(scope: crate::MemoryScope, file: &str, read_field: &str) -> String {
    format!(
        "{} reaches {file}, which {read_field} does not allow: the memory tools, the file \
         tools and the sandbox follow one rule, so allow it in {read_field} or drop {} from \
         memoryScope",
        scope.as_str(),
        scope.as_str()
    )
}

/// A relative path with plain components only (no `..`, `.`, empty parts or leading
/// `/`).
pub fn is_workspace_relative(path: &str) -> bool {
    !path.is_empty()
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'))
}

/// `https://host[...]`.
pub fn is_https_url(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|url| url.scheme() == "https" && url.host_str().is_some())
}

/// Checks everything the agent relies on before it accepts a config.
pub fn validate(config: &BotConfig) -> Result<(), ConfigError> {
    if config.schema_version != SCHEMA_VERSION {
        return Err(ConfigError::SchemaVersion {
            found: config.schema_version.clone(),
        });
    }
    validate_model(config)?;
    if !config.roles.contains_key(&config.default_role) {
        return Err(invalid(
            "defaultRole",
            format!("names role {:?}, which is not defined", config.default_role),
        ));
    }
    for (name, role) in &config.roles {
        validate_role(config, name, role)?;
    }
    validate_tool_prices(config)?;
    validate_contacts(config)?;
    if let Some(persona) = &config.persona
        && !std::path::Path::new(&persona.directory).is_absolute()
    {
        return Err(invalid(
            "persona.directory",
            format!("{:?} must be an absolute path", persona.directory),
        ));
    }
    validate_proactive(config)?;
    validate_mcp(&config.mcp)?;
    crate::media::check(&config.media).map_err(|(field, message)| invalid(field, message))?;
    validate_telemetry(config)?;
    if config.sandbox.backend == SandboxBackend::Kubernetes && config.sandbox.job_template.is_none()
    {
        return Err(invalid(
            "sandbox.jobTemplate",
            "is required for the kubernetes backend",
        ));
    }
    validate_transcription_price(config)?;
    if let Some(speech) = &config.media.speech {
        validate_speech_price(config, speech)?;
    }
    Ok(())
}

/// The model chain: a named model, named fallbacks with endpoints, a failover deadline.
fn validate_model(config: &BotConfig) -> Result<(), ConfigError> {
    if config.model.name.trim().is_empty() {
        return Err(invalid("model.name", "must not be empty"));
    }
    for (index, fallback) in config.model.fallbacks.iter().enumerate() {
        if fallback.name.trim().is_empty() {
            return Err(invalid(
                format!("model.fallbacks[{index}].name"),
                "must not be empty",
            ));
        }
        if fallback.base_url.trim().is_empty() {
            return Err(invalid(
                format!("model.fallbacks[{index}].baseUrl"),
                "must not be empty",
            ));
        }
    }
    if config.model.failover.deadline_seconds == 0 {
        return Err(invalid(
            "model.failover.deadlineSeconds",
            "must be at least 1",
        ));
    }
    Ok(())
}

/// One role: known tool patterns, declared MCP servers, bootstrap files, a budget ≥ 0,
/// its approval rules, and memory it may read as files.
fn validate_role(
    config: &BotConfig,
    name: &str,
    role: &crate::RoleConfig,
) -> Result<(), ConfigError> {
    for (list, patterns) in [("allow", &role.tools.allow), ("deny", &role.tools.deny)] {
        if let Some(pattern) = patterns.iter().find(|p| !is_known_tool_pattern(p)) {
            return Err(invalid(
                format!("roles.{name}.tools.{list}"),
                format!(
                    "{pattern:?} is not a known tool, group:<name>, matching glob or \
                     <mcp server>.<tool>"
                ),
            ));
        }
    }
    // Allowing a server nobody declared would silently allow nothing; denying one
    // is harmless (a shared Role may deny servers other bots have).
    if let Some(pattern) = role.tools.allow.iter().find(|pattern| {
        mcp::pattern_server(pattern).is_some_and(|server| config.mcp.server(server).is_none())
    }) {
        return Err(invalid(
            format!("roles.{name}.tools.allow"),
            format!(
                "{pattern:?} names MCP server {:?}, which mcp.servers does not declare",
                mcp::pattern_server(pattern).unwrap_or_default()
            ),
        ));
    }
    if let Some(file) = role
        .bootstrap
        .iter()
        .find(|f| !BOOTSTRAP_FILES.contains(&f.as_str()))
    {
        return Err(invalid(
            format!("roles.{name}.bootstrap"),
            format!("{file:?} is not a bootstrap file (one of {BOOTSTRAP_FILES:?})"),
        ));
    }
    if let Some(budget) = &role.budget
        && !(budget.usd.is_finite() && budget.usd >= 0.0)
    {
        return Err(invalid(
            format!("roles.{name}.budget.usd"),
            "must be a number ≥ 0",
        ));
    }
    validate_approvals(config, name, role)?;
    if let Some((scope, file)) = role.memory_beyond_read() {
        return Err(invalid(
            format!("roles.{name}.memoryScope"),
            memory_scope_message(scope, file, &format!("roles.{name}.files.read")),
        ));
    }
    Ok(())
}

/// Per-call tool prices name known tools (or a declared MCP server's) and are ≥ 0.
fn validate_tool_prices(config: &BotConfig) -> Result<(), ConfigError> {
    for (tool, usd) in &config.budget.tool_prices {
        // A server's tool (`docs.search`) may be priced when its server is declared.
        let server_tool = tool.split_once('.').is_some_and(|(server, name)| {
            config.mcp.server(server).is_some() && mcp::is_tool_name(server, name)
        });
        if !KNOWN_TOOLS.contains(&tool.as_str()) && !server_tool {
            return Err(invalid(
                format!("budget.toolPrices.{tool}"),
                "is not a known tool or a tool of a declared MCP server (<server>.<tool>)",
            ));
        }
        if !(usd.is_finite() && *usd >= 0.0) {
            return Err(invalid(
                format!("budget.toolPrices.{tool}"),
                "must be a number ≥ 0",
            ));
        }
    }
    Ok(())
}

/// Each contact's role exists, no identity belongs to two contacts, and every identity
/// link names its own contact's identities.
fn validate_contacts(config: &BotConfig) -> Result<(), ConfigError> {
    let mut owners: BTreeMap<&ChannelIdentity, &ContactSlug> = BTreeMap::new();
    for contact in &config.contacts {
        if !config.roles.contains_key(&contact.role) {
            return Err(invalid(
                format!("contacts[{}].role", contact.slug),
                format!("names role {:?}, which is not defined", contact.role),
            ));
        }
        for identity in &contact.identities {
            if let Some(previous) = owners.insert(identity, &contact.slug) {
                return Err(invalid(
                    format!("contacts[{}].identities", contact.slug),
                    format!("{identity:?} is also claimed by contact {previous:?}"),
                ));
            }
        }
    }
    for (slug, identities) in &config.identity_links {
        for identity in identities {
            if owners.get(identity) != Some(&slug) {
                return Err(invalid(
                    format!("identityLinks.{slug}"),
                    format!("{identity:?} does not belong to contact {slug:?}"),
                ));
            }
        }
    }
    Ok(())
}

/// The OTLP exporter's endpoint is an http(s) URL and its headers are header names.
fn validate_telemetry(config: &BotConfig) -> Result<(), ConfigError> {
    if let Some(otlp) = &config.telemetry.otlp {
        let parsed = url::Url::parse(&otlp.endpoint);
        if !parsed.is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
        {
            return Err(invalid(
                "telemetry.otlp.endpoint",
                format!("{:?} must be an http:// or https:// URL", otlp.endpoint),
            ));
        }
        if let Some(header) = otlp
            .headers_env
            .keys()
            .find(|header| http_header_name(header).is_none())
        {
            return Err(invalid(
                "telemetry.otlp.headersEnv",
                format!("{header:?} is not a header name"),
            ));
        }
    }
    Ok(())
}

/// A transcription model is priced per minute of audio in `model.prices`, or unpriced
/// models are allowed.
fn validate_transcription_price(config: &BotConfig) -> Result<(), ConfigError> {
    if let Some(transcription) = &config.media.transcription {
        let price = config
            .model
            .prices
            .get(&transcription.model)
            .and_then(|price| price.per_audio_minute);
        match price {
            Some(price) if !(price.is_finite() && price >= 0.0) => {
                return Err(invalid(
                    format!("model.prices.{}.perAudioMinute", transcription.model),
                    "must be a number ≥ 0",
                ));
            }
            None if config.budget.unpriced_models == UnpricedModels::Refuse => {
                return Err(invalid(
                    format!("model.prices.{}.perAudioMinute", transcription.model),
                    format!(
                        "media.transcription.model {:?} has no price per minute of audio, so \
                         no budget could count its calls; add it (a free local server: 0) or \
                         set budget.unpricedModels: allow",
                        transcription.model
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Speech is priced in `model.prices` under its model (the local engine under
/// `espeak-ng`), per million characters. An endpoint's model needs a price unless
/// unpriced models are allowed; the local engine calls no paid service and may go
/// unpriced.
fn validate_speech_price(
    config: &BotConfig,
    speech: &crate::SpeechConfig,
) -> Result<(), ConfigError> {
    let key = speech.price_key();
    let price = config
        .model
        .prices
        .get(key)
        .and_then(|price| price.per_million_characters);
    match price {
        Some(price) if !(price.is_finite() && price >= 0.0) => Err(invalid(
            format!("model.prices.{key}.perMillionCharacters"),
            "must be a number ≥ 0",
        )),
        None if speech.engine == crate::SpeechEngine::Openai
            && config.budget.unpriced_models == UnpricedModels::Refuse =>
        {
            Err(invalid(
                format!("model.prices.{key}.perMillionCharacters"),
                format!(
                    "media.speech.model {key:?} has no price per million characters, so no \
                     budget could count its calls; add it (a free local server: 0) or set \
                     budget.unpricedModels: allow"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Shortest heartbeat interval, in seconds.
pub const MIN_HEARTBEAT_SECONDS: u64 = 60;

/// Shortest interval a role may allow between two runs of a scheduled job, in seconds.
pub const MIN_JOB_INTERVAL_SECONDS: u64 = 60;

/// Whether `name` is an IANA time zone this build knows.
pub fn is_known_timezone(name: &str) -> bool {
    jiff::tz::TimeZone::get(name).is_ok()
}

/// Minutes after midnight of an `HH:MM` clock time.
pub fn clock_minutes(text: &str) -> Option<u32> {
    let (hours, minutes) = text.split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
    (hours < 24 && minutes < 60).then_some(hours * 60 + minutes)
}

// Heartbeat, schedule, skills and the per-role cron and spawn limits.
fn validate_proactive(config: &BotConfig) -> Result<(), ConfigError> {
    if !is_known_timezone(&config.schedule.timezone) {
        return Err(invalid(
            "schedule.timezone",
            format!("{:?} is not an IANA time zone", config.schedule.timezone),
        ));
    }
    if let Some(heartbeat) = &config.heartbeat {
        if heartbeat.every_seconds < MIN_HEARTBEAT_SECONDS {
            return Err(invalid(
                "heartbeat.everySeconds",
                format!("must be at least {MIN_HEARTBEAT_SECONDS}"),
            ));
        }
        if !config.roles.contains_key(&heartbeat.role) {
            return Err(invalid(
                "heartbeat.role",
                format!("names role {:?}, which is not defined", heartbeat.role),
            ));
        }
        if let Some(slug) = heartbeat
            .notify
            .iter()
            .find(|slug| !config.contacts.iter().any(|contact| &contact.slug == *slug))
        {
            return Err(invalid(
                "heartbeat.notify",
                format!("{slug:?} is not a contact of this bot"),
            ));
        }
        if let Some(watch) = &heartbeat.watch {
            if let Some(file) = watch.files.iter().find(|file| !is_workspace_relative(file)) {
                return Err(invalid(
                    "heartbeat.watch.files",
                    format!("{file:?} is not a relative path inside the workspace"),
                ));
            }
            if let Some(url) = watch.urls.iter().find(|url| !is_https_url(url)) {
                return Err(invalid(
                    "heartbeat.watch.urls",
                    format!("{url:?} is not an https:// URL with a host"),
                ));
            }
        }
        if let Some(hours) = &heartbeat.active_hours {
            for (field, value) in [("start", &hours.start), ("end", &hours.end)] {
                if clock_minutes(value).is_none() {
                    return Err(invalid(
                        format!("heartbeat.activeHours.{field}"),
                        format!("{value:?} is not a time of day as HH:MM (00:00 to 23:59)"),
                    ));
                }
            }
            if hours.start == hours.end {
                return Err(invalid(
                    "heartbeat.activeHours",
                    "start and end are equal, which leaves no active time",
                ));
            }
            if let Some(zone) = &hours.timezone
                && !is_known_timezone(zone)
            {
                return Err(invalid(
                    "heartbeat.activeHours.timezone",
                    format!("{zone:?} is not an IANA time zone"),
                ));
            }
        }
    }
    if let Some(directory) = config
        .skills
        .directories
        .iter()
        .find(|directory| !std::path::Path::new(directory).is_absolute())
    {
        return Err(invalid(
            "skills.directories",
            format!("{directory:?} must be an absolute path"),
        ));
    }
    for (name, role) in &config.roles {
        if role.cron.min_interval_seconds < MIN_JOB_INTERVAL_SECONDS {
            return Err(invalid(
                format!("roles.{name}.cron.minIntervalSeconds"),
                format!("must be at least {MIN_JOB_INTERVAL_SECONDS}"),
            ));
        }
        if role.spawn.max_concurrent == 0 {
            return Err(invalid(
                format!("roles.{name}.spawn.maxConcurrent"),
                "must be at least 1 (deny sessions_spawn to forbid sub-agents)",
            ));
        }
        if role.spawn.timeout_seconds == 0 {
            return Err(invalid(
                format!("roles.{name}.spawn.timeoutSeconds"),
                "must be at least 1",
            ));
        }
        if !(1..=MAX_RUNNING_PROCESSES).contains(&role.process.max_running) {
            return Err(invalid(
                format!("roles.{name}.process.maxRunning"),
                format!(
                    "must be 1 to {MAX_RUNNING_PROCESSES} (deny process to forbid background commands)"
                ),
            ));
        }
    }
    Ok(())
}

/// Approval rules name known tools and approvers who exist, and someone besides the
/// requester can always decide.
fn validate_approvals(
    config: &BotConfig,
    name: &str,
    role: &crate::RoleConfig,
) -> Result<(), ConfigError> {
    for (index, rule) in role.approvals.iter().enumerate() {
        let field = |part: &str| format!("roles.{name}.approvals[{index}].{part}");
        if let Some(porter) = &rule.porter {
            if !rule.tools.is_empty() || !rule.when.is_empty() {
                return Err(invalid(
                    field("porter"),
                    "a rule names either tools (with when) or porter requests, not both",
                ));
            }
            validate_porter_requests(porter, &field)?;
        } else if rule.tools.is_empty() {
            return Err(invalid(
                field("tools"),
                "must name at least one tool (or the rule names porter requests)",
            ));
        }
        if let Some(pattern) = rule.tools.iter().find(|p| !is_known_tool_pattern(p)) {
            return Err(invalid(
                field("tools"),
                format!(
                    "{pattern:?} is not a known tool, group:<name>, matching glob or <mcp server>.<tool>"
                ),
            ));
        }
        if let Some((argument, glob)) = rule
            .when
            .iter()
            .find(|(_, glob)| globset::Glob::new(glob).is_err())
        {
            return Err(invalid(
                field(&format!("when.{argument}")),
                format!("{glob:?} is not a glob"),
            ));
        }
        validate_approvers(config, name, &rule.approvers, &field)?;
        if rule.timeout_seconds == 0 || rule.timeout_seconds > crate::MAX_APPROVAL_TIMEOUT_SECONDS {
            return Err(invalid(
                field("timeoutSeconds"),
                format!("must be 1 to {}", crate::MAX_APPROVAL_TIMEOUT_SECONDS),
            ));
        }
    }
    // A top-up named in the role is served only where someone else decides it and there
    // is a budget to raise; refused here rather than silently not offered.
    if role.tools.allow.iter().any(|tool| tool == TOP_UP_TOOL) {
        if role.budget.is_none() {
            return Err(invalid(
                format!("roles.{name}.tools.allow"),
                format!("allows {TOP_UP_TOOL}, but the role has no budget to top up"),
            ));
        }
        let covered = role.approvals.iter().any(|rule| {
            rule.tools.iter().any(|pattern| {
                pattern == TOP_UP_TOOL
                    || globset::Glob::new(pattern)
                        .is_ok_and(|glob| glob.compile_matcher().is_match(TOP_UP_TOOL))
            })
        });
        if !covered {
            return Err(invalid(
                format!("roles.{name}.tools.allow"),
                format!(
                    "allows {TOP_UP_TOOL}, but no rule in roles.{name}.approvals names it: a \
                     top-up runs only once someone else approves it"
                ),
            ));
        }
    }
    Ok(())
}

/// A rule's approvers: at least one, each role and contact defined, and not only the
/// one member of the requesting role (nobody approves their own request).
fn validate_approvers(
    config: &BotConfig,
    name: &str,
    approvers: &crate::Approvers,
    field: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if approvers.roles.is_empty() && approvers.contacts.is_empty() {
        return Err(invalid(field("approvers"), "must name a role or a contact"));
    }
    if let Some(missing) = approvers
        .roles
        .iter()
        .find(|role| !config.roles.contains_key(*role))
    {
        return Err(invalid(
            field("approvers.roles"),
            format!("names role {missing:?}, which is not defined"),
        ));
    }
    if let Some(missing) = approvers
        .contacts
        .iter()
        .find(|slug| !config.contacts.iter().any(|contact| contact.slug == **slug))
    {
        return Err(invalid(
            field("approvers.contacts"),
            format!("names contact {missing:?}, which is not defined"),
        ));
    }
    // Nobody approves their own request: when the only possible approver is the one
    // member of this role, its requests could never be decided.
    let mut deciders: Vec<&ContactSlug> = config
        .contacts
        .iter()
        .filter(|contact| approvers.roles.contains(&contact.role))
        .map(|contact| &contact.slug)
        .chain(approvers.contacts.iter())
        .collect();
    deciders.sort();
    deciders.dedup();
    let members: Vec<&ContactSlug> = config
        .contacts
        .iter()
        .filter(|contact| contact.role == name)
        .map(|contact| &contact.slug)
        .collect();
    if let [only] = deciders.as_slice()
        && members == [*only]
    {
        return Err(invalid(
            field("approvers"),
            format!(
                "the only approver, {only:?}, is the only member of role {name:?}: \
                 nobody approves their own request, so theirs could never be decided"
            ),
        ));
    }
    Ok(())
}

/// A rule's Porter requests: hosts, methods and path globs Porter can match.
fn validate_porter_requests(
    porter: &crate::PorterRequests,
    field: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if porter.hosts.is_empty() {
        return Err(invalid(field("porter.hosts"), "must name a host (or *)"));
    }
    if let Some(host) = porter
        .hosts
        .iter()
        .find(|host| *host != "*" && porter_protocol_host(host).is_none())
    {
        return Err(invalid(
            field("porter.hosts"),
            format!("{host:?} is not a host name[:port] or *"),
        ));
    }
    if porter.methods.is_empty() {
        return Err(invalid(
            field("porter.methods"),
            "must name a method (or *)",
        ));
    }
    if let Some(method) = porter.methods.iter().find(|method| {
        *method != "*"
            && (method.is_empty() || !method.bytes().all(|byte| byte.is_ascii_alphabetic()))
    }) {
        return Err(invalid(
            field("porter.methods"),
            format!("{method:?} is not an HTTP method or *"),
        ));
    }
    if porter.paths.is_empty() {
        return Err(invalid(field("porter.paths"), "must name a path glob"));
    }
    for path in &porter.paths {
        let glob = globset::GlobBuilder::new(path)
            .literal_separator(true)
            .backslash_escape(true)
            .build();
        if !path.starts_with('/') || glob.is_err() {
            return Err(invalid(
                field("porter.paths"),
                format!("{path:?} is not a path glob starting with /"),
            ));
        }
    }
    Ok(())
}

/// `name[:port]` as Porter reads a host: a plain DNS name or IPv4 address, a port 1 to
/// 65535.
fn porter_protocol_host(host: &str) -> Option<()> {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    if let Some(port) = port {
        port.parse::<u16>().ok().filter(|port| *port != 0)?;
    }
    let plain = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        });
    plain.then_some(())
}

/// `name` when it is a valid HTTP header name (RFC 9110 token).
fn http_header_name(name: &str) -> Option<&str> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    (!name.is_empty() && name.chars().all(token)).then_some(name)
}

/// Server names unique and well-formed, transports usable, credentials named.
fn validate_mcp(config: &crate::McpConfig) -> Result<(), ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    for (index, server) in config.servers.iter().enumerate() {
        let field = |name: &str| format!("mcp.servers[{index}].{name}");
        if !mcp::is_server_name(&server.name) {
            return Err(invalid(
                field("name"),
                format!(
                    "{:?} must be 1-{} characters of a-z, 0-9 and -, starting with a letter",
                    server.name,
                    mcp::MAX_SERVER_NAME_CHARS
                ),
            ));
        }
        if !seen.insert(server.name.as_str()) {
            return Err(invalid(
                field("name"),
                format!("{:?} is declared twice", server.name),
            ));
        }
        match &server.transport {
            crate::McpTransport::Http { url } if !is_https_url(url) => {
                return Err(invalid(
                    field("transport.http.url"),
                    format!("{url:?} must be an https:// URL (Porter's proxy speaks TLS only)"),
                ));
            }
            crate::McpTransport::Stdio { command } if command.is_empty() => {
                return Err(invalid(
                    field("transport.stdio.command"),
                    "must not be empty",
                ));
            }
            _ => {}
        }
        if let Some(credential) = &server.credential {
            if credential.porter_entry.trim().is_empty() {
                return Err(invalid(
                    field("credential.porterEntry"),
                    "must not be empty",
                ));
            }
            if credential.placeholder_env.trim().is_empty() {
                return Err(invalid(
                    field("credential.placeholderEnv"),
                    "must not be empty",
                ));
            }
            if credential.header.trim().is_empty() {
                return Err(invalid(field("credential.header"), "must not be empty"));
            }
        }
        if server.max_tools == 0 || server.max_schema_bytes == 0 || server.max_result_chars == 0 {
            return Err(invalid(
                field("maxTools"),
                "maxTools, maxSchemaBytes and maxResultChars must be at least 1",
            ));
        }
        if server.timeout_seconds == 0 {
            return Err(invalid(field("timeoutSeconds"), "must be at least 1"));
        }
    }
    Ok(())
}

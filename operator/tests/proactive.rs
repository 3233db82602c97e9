//! Heartbeat, schedule and skills on the SaintBot, cron and spawn limits on Roles: the
//! example fixture through the real `validate` and builders, its config read back by the
//! agent's own parser (`BotConfig::from_json`, the contract), and every refusal naming
//! the field it is about.

mod support;

use saint_config::{BotConfig, SKILLS_MOUNT_PATH};
use saint_operator::saintbot_controller::{
    build::{build_children, config_map::rendered_config_json},
    validate::{ValidateError, validate},
};
use serde_json::{Value, json};
use support::{load, settings, validated};

/// The fixture with `change` applied to its JSON form (bot and Roles), validated.
fn validate_with(
    change_bot: impl FnOnce(&mut Value),
    change_roles: impl FnOnce(&mut Vec<Value>),
) -> Result<saint_operator::saintbot_controller::validate::ValidatedSaintBot, ValidateError> {
    let (bot, mut dereferenced) = load("acme.yaml");
    let mut bot_value = serde_json::to_value(&bot).unwrap();
    change_bot(&mut bot_value);
    let mut roles: Vec<Value> = dereferenced
        .roles
        .iter()
        .map(|role| serde_json::to_value(role).unwrap())
        .collect();
    change_roles(&mut roles);
    dereferenced.roles = roles
        .into_iter()
        .map(|role| serde_json::from_value(role).unwrap())
        .collect();
    validate(
        &serde_json::from_value(bot_value).unwrap(),
        &dereferenced,
        &settings(),
    )
}

fn refused(change_bot: impl FnOnce(&mut Value)) -> ValidateError {
    validate_with(change_bot, |_| {}).expect_err("the change is refused")
}

fn role_named<'a>(roles: &'a mut [Value], name: &str) -> &'a mut Value {
    roles
        .iter_mut()
        .find(|role| role["metadata"]["name"] == name)
        .unwrap()
}

#[test]
fn heartbeat_schedule_skills_and_role_limits_render_into_a_config_the_agent_accepts() {
    let bot = validated("acme.yaml");
    let json = rendered_config_json(&bot);
    let config = BotConfig::from_json(&json).expect("the agent accepts the rendered config");

    let heartbeat = config.heartbeat.as_ref().expect("heartbeat rendered");
    assert_eq!(heartbeat.every_seconds, 1800);
    assert_eq!(heartbeat.role, "employee");
    let notify: Vec<&str> = heartbeat.notify.iter().map(|slug| slug.as_str()).collect();
    assert_eq!(notify, ["acme-ana"]);
    let hours = heartbeat.active_hours.as_ref().expect("active hours");
    assert_eq!(
        (hours.start.as_str(), hours.end.as_str()),
        ("08:00", "18:00")
    );
    assert_eq!(hours.timezone.as_deref(), Some("Europe/Zagreb"));

    assert_eq!(config.schedule.timezone, "Europe/Zagreb");
    assert_eq!(config.schedule.missed_run_grace_seconds, 7200);
    assert_eq!(config.skills.directories, [SKILLS_MOUNT_PATH]);

    let owner = &config.roles["owner"];
    assert_eq!(
        (owner.cron.max_jobs, owner.cron.min_interval_seconds),
        (50, 60)
    );
    assert_eq!(
        (
            owner.spawn.max_depth,
            owner.spawn.max_concurrent,
            owner.spawn.timeout_seconds
        ),
        (2, 4, 1800)
    );
    // A Role setting one limit keeps the others' defaults.
    let manager = &config.roles["manager"];
    assert_eq!(manager.cron.max_jobs, 20);
    assert_eq!(
        manager.cron.min_interval_seconds,
        saint_config::DEFAULT_MIN_INTERVAL_SECONDS
    );
    assert_eq!(config.roles["employee"].spawn, Default::default());
}

#[test]
fn each_skill_key_is_projected_read_only_as_its_folder_s_skill_md_into_the_agent_only() {
    let children = build_children(&validated("acme.yaml"));
    let deployment = serde_json::to_value(&children.deployment).unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|volume| volume["name"] == "skills")
        .expect("a skills volume");
    assert_eq!(
        volume["projected"]["sources"],
        json!([
            {"configMap": {"name": "acme-skills", "items": [{"key": "scheduling.md", "path": "scheduling/SKILL.md"}]}},
            {"configMap": {"name": "acme-skill-google", "items": [{"key": "SKILL.md", "path": "google-workspace/SKILL.md"}]}},
        ])
    );
    let mounts_of = |container: &str| -> Vec<Value> {
        pod["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|candidate| candidate["name"] == container)
            .unwrap()["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|mount| mount["name"] == "skills")
            .cloned()
            .collect()
    };
    assert_eq!(
        mounts_of("agent"),
        [json!({"name": "skills", "mountPath": SKILLS_MOUNT_PATH, "readOnly": true})]
    );
    assert!(mounts_of("porter").is_empty(), "porter gets no skills");
}

#[test]
fn a_bot_without_the_new_fields_renders_as_before() {
    let bot = validate_with(
        |bot| {
            let spec = bot["spec"].as_object_mut().unwrap();
            for field in ["heartbeat", "schedule", "skills"] {
                spec.remove(field).unwrap();
            }
        },
        |roles| {
            for role in roles {
                let spec = role["spec"].as_object_mut().unwrap();
                spec.remove("cron");
                spec.remove("spawn");
            }
        },
    )
    .unwrap();
    let config: Value = serde_json::from_str(&rendered_config_json(&bot)).unwrap();
    for field in ["heartbeat", "schedule", "skills"] {
        assert!(config.get(field).is_none(), "{field} in {config}");
    }
    for (name, role) in config["roles"].as_object().unwrap() {
        assert!(
            role.get("cron").is_none() && role.get("spawn").is_none(),
            "{name}: {role}"
        );
    }
    let deployment = serde_json::to_value(build_children(&bot).deployment).unwrap();
    assert!(
        !deployment.to_string().contains("saint-skills"),
        "no skills volume or mount"
    );
}

#[test]
fn the_heartbeat_role_must_be_one_the_bot_selects() {
    let error = refused(|bot| bot["spec"]["heartbeat"]["role"] = json!("auditor"));
    assert_eq!(error.reason().as_str(), "RoleNotFound");
    let message = error.to_string();
    assert!(
        message.contains("spec.heartbeat.role") && message.contains("auditor"),
        "{message}"
    );
}

/// An edit of the bot's JSON form.
type Change = Box<dyn FnOnce(&mut Value)>;

#[test]
fn every_bad_heartbeat_or_schedule_value_is_refused_naming_its_field() {
    let cases: Vec<(&str, Change)> = vec![
        (
            "spec.heartbeat.notify",
            Box::new(|bot| bot["spec"]["heartbeat"]["notify"] = json!(["acme-ana", "acme-zoe"])),
        ),
        (
            "spec.heartbeat.everySeconds",
            Box::new(|bot| bot["spec"]["heartbeat"]["everySeconds"] = json!(30)),
        ),
        (
            "spec.heartbeat.activeHours.start",
            Box::new(|bot| bot["spec"]["heartbeat"]["activeHours"]["start"] = json!("8:00")),
        ),
        (
            "spec.heartbeat.activeHours.end",
            Box::new(|bot| bot["spec"]["heartbeat"]["activeHours"]["end"] = json!("24:00")),
        ),
        (
            "spec.heartbeat.activeHours",
            Box::new(|bot| bot["spec"]["heartbeat"]["activeHours"]["end"] = json!("08:00")),
        ),
        (
            "spec.heartbeat.activeHours.timeZone",
            Box::new(|bot| {
                bot["spec"]["heartbeat"]["activeHours"]["timeZone"] = json!("Europe/Zagrebb")
            }),
        ),
        (
            "spec.schedule.timeZone",
            Box::new(|bot| bot["spec"]["schedule"]["timeZone"] = json!("CEST+2")),
        ),
        (
            "spec.schedule.missedRunGraceSeconds",
            Box::new(|bot| bot["spec"]["schedule"]["missedRunGraceSeconds"] = json!(10_000_000)),
        ),
    ];
    for (field, change) in cases {
        let error = refused(change);
        assert_eq!(error.reason().as_str(), "InvalidSpec", "{field}: {error}");
        assert!(
            error.to_string().contains(&format!("{field}:")),
            "{field}: {error}"
        );
    }
}

#[test]
fn skills_need_safe_unique_names_and_an_existing_config_map_key() {
    let error = refused(|bot| bot["spec"]["skills"][1]["name"] = json!("scheduling"));
    assert!(
        error.to_string().contains("spec.skills[1].name") && error.to_string().contains("twice"),
        "{error}"
    );
    let error = refused(|bot| bot["spec"]["skills"][0]["name"] = json!("../etc"));
    assert!(error.to_string().contains("spec.skills[0].name"), "{error}");

    let error = refused(|bot| bot["spec"]["skills"][0]["configMapRef"]["key"] = json!("nope.md"));
    assert_eq!(error.reason().as_str(), "ConfigMapNotFound");
    let message = error.to_string();
    assert!(
        message.contains("spec.skills[0].configMapRef")
            && message.contains("\"nope.md\"")
            && message.contains("acme-skills"),
        "{message}"
    );

    let error = refused(|bot| bot["spec"]["skills"][1]["configMapRef"]["name"] = json!("gone"));
    assert_eq!(error.reason().as_str(), "ConfigMapNotFound");
    assert!(
        error.to_string().contains("spec.skills[1].configMapRef")
            && error.to_string().contains("ConfigMap \"gone\""),
        "{error}"
    );
}

#[test]
fn role_limits_outside_their_bounds_leave_the_role_out_naming_it_and_the_field() {
    let cases: [(&str, Value); 6] = [
        (
            "spec.cron.minIntervalSeconds",
            json!({"cron": {"minIntervalSeconds": 30}}),
        ),
        ("spec.cron.maxJobs", json!({"cron": {"maxJobs": 5000}})),
        ("spec.spawn.maxDepth", json!({"spawn": {"maxDepth": 6}})),
        (
            "spec.spawn.maxConcurrent",
            json!({"spawn": {"maxConcurrent": 0}}),
        ),
        (
            "spec.spawn.timeoutSeconds",
            json!({"spawn": {"timeoutSeconds": 0}}),
        ),
        (
            "spec.process.maxRunning",
            json!({"process": {"maxRunning": 0}}),
        ),
    ];
    for (field, limits) in cases {
        // A Role's problem is the Role's: the bot renders without it and without the
        // Contact holding it (acme-marko), and says which Role and field.
        let bot = validate_with(
            |_| {},
            |roles| {
                let spec = role_named(roles, "manager")["spec"]
                    .as_object_mut()
                    .unwrap();
                for (key, value) in limits.as_object().unwrap() {
                    spec.insert(key.clone(), value.clone());
                }
            },
        )
        .unwrap_or_else(|error| panic!("{field}: the bot renders: {error}"));
        assert!(!bot.config.roles.contains_key("manager"), "{field}");
        assert!(
            !bot.config
                .contacts
                .iter()
                .any(|contact| contact.slug.as_str() == "acme-marko"),
            "{field}"
        );
        let left_out = &bot.left_out_roles;
        assert_eq!(left_out.len(), 1, "{field}: {left_out:?}");
        let message = left_out[0].error.to_string();
        assert!(
            message.contains("Role \"manager\"") && message.contains(&format!("{field}:")),
            "{field}: {message}"
        );
        assert_eq!(left_out[0].contacts, ["acme-marko"], "{field}");
    }
}

#[test]
fn a_heartbeat_contact_without_an_identifier_on_a_served_channel_is_refused_naming_it() {
    // acme-ana is reached on WhatsApp; without that channel only http is left.
    let error = refused(|bot| {
        bot["spec"]["channels"]
            .as_array_mut()
            .unwrap()
            .retain(|channel| channel["kind"] == "http");
    });
    assert_eq!(error.reason().as_str(), "InvalidSpec");
    let message = error.to_string();
    assert!(
        message.contains("spec.heartbeat.notify")
            && message.contains("\"acme-ana\" cannot be reached")
            && message.contains("its identifiers: whatsapp, email, discord")
            && message.contains("the bot's channels: http"),
        "{message}"
    );
}

#[test]
fn a_role_naming_a_skill_the_bot_lacks_or_an_unselected_visible_role_is_left_out() {
    let cases: [(&str, &str, Value, &str); 2] = [
        (
            "employee",
            "spec.skills",
            json!({"skills": ["scheduling", "invoicing"]}),
            "\"invoicing\" is not a skill SaintBot \"my-bot\" declares in its spec.skills \
             (declared: scheduling, google-workspace)",
        ),
        (
            "manager",
            "spec.sessionsVisibleRoles",
            json!({"sessionsVisibility": "ownAndRoles", "sessionsVisibleRoles": ["employee", "auditor"]}),
            "\"auditor\" is not a Role SaintBot \"my-bot\" selects",
        ),
    ];
    for (role, field, change, expected) in cases {
        let bot = validate_with(
            // The heartbeat runs with `employee`; it must stay renderable for this test.
            |bot| bot["spec"]["heartbeat"]["role"] = json!("owner"),
            |roles| {
                let spec = role_named(roles, role)["spec"].as_object_mut().unwrap();
                for (key, value) in change.as_object().unwrap() {
                    spec.insert(key.clone(), value.clone());
                }
            },
        )
        .unwrap_or_else(|error| panic!("{field}: the bot renders: {error}"));
        assert!(!bot.config.roles.contains_key(role), "{field}");
        let left_out = &bot.left_out_roles;
        assert_eq!(left_out.len(), 1, "{field}: {left_out:?}");
        let message = left_out[0].error.to_string();
        assert!(
            message.contains(&format!("Role {role:?}"))
                && message.contains(&format!("{field}: {expected}")),
            "{field}: {message}"
        );
    }
}

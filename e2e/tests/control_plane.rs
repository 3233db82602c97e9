//! The control plane itself: before any Saint scenario can mean anything, the
//! API server must enforce Pod Security and the controller manager must run
//! the garbage collector and the Deployment → ReplicaSet → Pod chain.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    core::v1::{ConfigMap, Pod},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use saint_e2e::{Environment, manifests, namespace, wait};

use saint_e2e::TestResult;

#[tokio::test]
async fn restricted_namespace_refuses_a_root_pod_with_pod_security_words() -> TestResult {
    let environment = Environment::from_env()?;
    let client = environment.admin_client().await?;
    let namespace = namespace::create(&client, "cp-psa", true).await?;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "root-pod"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))?;
    let refused = Api::<Pod>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &pod)
        .await
        .expect_err("a pod without a restricted security context must be refused");
    let message = saint_e2e::api_message(&refused);
    assert!(
        message.contains("violates PodSecurity \"restricted:latest\""),
        "unexpected refusal: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn garbage_collector_deletes_a_child_whose_owner_is_gone() -> TestResult {
    let environment = Environment::from_env()?;
    let client = environment.admin_client().await?;
    let namespace = namespace::create(&client, "cp-gc", false).await?;
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
    let owner = config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "owner"}}))?,
        )
        .await?;
    let child: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "child", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid, "controller": true, "blockOwnerDeletion": true
        }]}
    }))?;
    config_maps.create(&PostParams::default(), &child).await?;
    config_maps
        .delete("owner", &DeleteParams::background())
        .await?;
    wait::until(
        "the child ConfigMap garbage-collected",
        Duration::from_secs(60),
        || async {
            match config_maps.get_opt("child").await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err("child still present".to_owned()),
                Err(error) => Err(error.to_string()),
            }
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn deployment_controller_creates_admitted_pods_without_a_kubelet() -> TestResult {
    let environment = Environment::from_env()?;
    let client = environment.admin_client().await?;
    let namespace = namespace::create(&client, "cp-deploy", true).await?;
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: restricted-ok}
spec:
  replicas: 1
  selector: {matchLabels: {app: restricted-ok}}
  template:
    metadata: {labels: {app: restricted-ok}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: main
        image: busybox
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
"#;
    manifests::apply_all(&client, deployment, &namespace).await?;
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace);
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &namespace);
    wait::until(
        "a pod created by the ReplicaSet controller",
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            if !list.items.is_empty() {
                return Ok(());
            }
            let sets = replica_sets
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            Err(format!(
                "no pods; replica sets: {:?}",
                sets.items
                    .iter()
                    .map(|set| (set.metadata.name.clone(), set.status.clone()))
                    .collect::<Vec<_>>()
            ))
        },
    )
    .await?;
    Ok(())
}

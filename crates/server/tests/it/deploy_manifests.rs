//! `deploy/`'s Kubernetes manifests held to the server they deploy: every probe path answers
//! 200 on a running server, the container's arguments parse as `tokenmill serve` flags, and
//! ports, labels and the grace period agree across the Deployment, the Service and the
//! InferencePool values.

use crate::common;

use clap::Parser;
use common::*;
use serde::Deserialize;
use serde_yaml::Value;
use tokenmill_server::http::api_server::ServeArgs;
use tokenmill_server::metrics::MetricsCompat;

const DEPLOYMENT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/tokenmill.yaml"
));
const POOL_VALUES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/inferencepool-values.yaml"
));

#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    serve: ServeArgs,
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("the manifest parses as YAML"))
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("deploy/tokenmill.yaml has no {kind}"))
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{value:?} is not a string"))
}

fn number(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("{value:?} is not a number"))
}

/// Every `key: value` of `selector` is a label of `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_mapping().expect("a selector is a mapping");
    !selector.is_empty() && selector.iter().all(|(key, value)| labels[key] == *value)
}

#[tokio::test]
async fn the_manifests_agree_with_the_server_and_with_each_other() {
    crate::common::skip_without_model!();
    let docs = documents(DEPLOYMENT);
    let deployment = of_kind(&docs, "Deployment");
    let service = of_kind(&docs, "Service");
    let pod = &deployment["spec"]["template"];
    let pod_labels = &pod["metadata"]["labels"];
    assert!(selects(
        &deployment["spec"]["selector"]["matchLabels"],
        pod_labels
    ));
    let containers = pod["spec"]["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let container = &containers[0];

    // The arguments are `tokenmill serve` flags, as the binary parses them.
    assert_eq!(container["command"][0], "tokenmill");
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    assert_eq!(args[0], "serve");
    let serve =
        Serve::try_parse_from(std::iter::once("tokenmill").chain(args[1..].iter().copied()))
            .unwrap_or_else(|e| panic!("the container's flags do not parse: {e}"))
            .serve;
    assert_eq!(serve.host, "0.0.0.0", "a pod must listen beyond loopback");

    // One port, named, the one the server listens on.
    let ports = container["ports"].as_sequence().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(number(&ports[0]["containerPort"]), u64::from(serve.port));
    let port_name = text(&ports[0]["name"]);

    // Probes: paths the server answers 200 on, on that port.
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(text(&get["port"]), port_name, "{probe}");
        let path = text(&get["path"]);
        let (status, _) = get_text(path).await;
        assert_eq!(status, 200, "{probe} {path}");
    }

    // The grace period covers the preStop pause and the server's own drain limit.
    let pause = number(&container["lifecycle"]["preStop"]["sleep"]["seconds"]);
    let grace = number(&pod["spec"]["terminationGracePeriodSeconds"]);
    assert!(
        grace > pause + serve.shutdown_timeout,
        "terminationGracePeriodSeconds {grace} <= preStop {pause} s + --shutdown-timeout {}",
        serve.shutdown_timeout
    );

    // The model directory is a mounted volume that the pod declares.
    let env = container["env"].as_sequence().unwrap();
    let model_dir = env
        .iter()
        .find(|e| e["name"] == "TOKENMILL_MODEL_DIR")
        .map(|e| text(&e["value"]))
        .expect("TOKENMILL_MODEL_DIR is set");
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == model_dir)
        .expect("the model directory is mounted");
    let volumes = pod["spec"]["volumes"].as_sequence().unwrap();
    assert!(volumes.iter().any(|v| v["name"] == mount["name"]));

    // The Service selects these pods and sends to the named port.
    assert!(selects(&service["spec"]["selector"], pod_labels));
    assert_eq!(text(&service["spec"]["ports"][0]["targetPort"]), port_name);

    // The InferencePool selects them too, on the server's port; a pool that reads vLLM's
    // metric names needs the replicas to export them.
    let values = documents(POOL_VALUES).remove(0);
    let pool = &values["inferencePool"];
    assert!(selects(&pool["modelServers"]["matchLabels"], pod_labels));
    assert_eq!(
        number(&pool["targetPorts"][0]["number"]),
        u64::from(serve.port)
    );
    if pool["modelServerType"] == "vllm" {
        assert_eq!(serve.metrics_compat, Some(MetricsCompat::Vllm));
    }
}

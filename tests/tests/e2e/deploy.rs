//! `deploy/kubernetes/`: every manifest validates against the Kubernetes schemas
//! (`kubernetes-validate`, which `.ci/run` installs), the custom resources the schemas do not
//! know (PodMonitor, PrometheusRule) have the structure the Prometheus Operator reads, the
//! PrometheusRule carries exactly the rules of `rules/prometheus/`, and the pieces fit: the
//! sidecar's configuration is valid for the real binary, listens where the pod and the
//! PodMonitor expect, and reads its token from where the Secret is mounted.

use std::process::Command;

use serde_json::Value;
use skewwatch_e2e::agent::{TempDir, binary};
use skewwatch_e2e::deploy::{PROMETHEUS_RULE_FILE, RULES_FILE, prometheus_rule, repo_root};
use skewwatch_e2e::tools;

const DIR: &str = "deploy/kubernetes";

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The YAML manifests of `deploy/kubernetes/`, as repository paths, sorted.
fn manifests() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(repo_root().join(DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .map(|n| format!("{DIR}/{n}"))
        .collect();
    out.sort();
    out
}

fn deployment() -> Value {
    yaml(&format!("{DIR}/deployment.yaml"))
}

/// The skewwatch sidecar of the example Deployment.
fn sidecar(d: &Value) -> &Value {
    d["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .expect("the sidecar is an init container")
        .iter()
        .find(|c| c["name"] == "skewwatch")
        .expect("an init container named skewwatch")
}

#[test]
fn the_prometheus_rule_carries_exactly_the_rules_file() {
    let committed = read(PROMETHEUS_RULE_FILE);
    assert!(
        committed == prometheus_rule(&read(RULES_FILE)),
        "{PROMETHEUS_RULE_FILE} differs from {RULES_FILE}: run \
         `cargo run -p skewwatch-e2e --example generate` and commit the result"
    );
    let cr = yaml(PROMETHEUS_RULE_FILE);
    assert_eq!(cr["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(cr["kind"], "PrometheusRule");
    assert!(cr["metadata"]["name"].is_string());
    let rules = yaml(RULES_FILE);
    assert!(rules["groups"].as_array().is_some_and(|g| g.len() >= 3));
    assert_eq!(cr["spec"]["groups"], rules["groups"]);
    assert_eq!(
        cr["spec"].as_object().unwrap().len(),
        1,
        "spec holds groups only"
    );
}

#[test]
fn the_sidecar_is_native_probed_sized_and_locked_down() {
    let d = deployment();
    let spec = &d["spec"]["template"]["spec"];
    let c = sidecar(&d);
    assert_eq!(
        c["restartPolicy"], "Always",
        "a native sidecar is an init container that restarts"
    );
    let port = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("a port named metrics");
    assert_eq!(port["containerPort"], 9477);
    for (probe, path) in [
        ("startupProbe", "/readyz"),
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    // The memory budget is 256 MiB; requests cover the measured RSS; no CPU limit.
    let r = &c["resources"];
    assert_eq!(r["limits"]["memory"], "256Mi");
    assert!(r["limits"]["cpu"].is_null(), "no CPU limit");
    assert_eq!(r["requests"]["memory"], "64Mi");
    assert_eq!(r["requests"]["cpu"], "50m");
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    // The image scripts/build-image.sh names, as the user its Containerfile sets.
    assert!(
        read("scripts/build-image.sh").contains("IMAGE_NAME=${IMAGE_NAME:-localhost/skewwatch}")
    );
    assert_eq!(
        c["image"],
        format!("localhost/skewwatch:{}", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        read("deploy/image/Containerfile")
            .lines()
            .any(|l| l == "USER 65532:65532")
    );
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["runAsGroup"], 65532);
    assert!(spec["securityContext"]["fsGroup"].is_u64());
    // Every mount names a volume of the pod; the state directory is an emptyDir.
    let volumes = spec["volumes"].as_array().unwrap();
    let volume = |name: &Value| volumes.iter().find(|v| &v["name"] == name);
    for m in c["volumeMounts"].as_array().unwrap() {
        assert!(volume(&m["name"]).is_some(), "no volume {}", m["name"]);
    }
    let state = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/var/lib/skewwatch")
        .expect("a state directory");
    assert!(volume(&state["name"]).unwrap()["emptyDir"].is_object());
    // The application runs beside it, and not as an init container.
    assert!(spec["containers"].as_array().is_some_and(|c| !c.is_empty()));
}

/// The mount path of the volume that carries `source` (`configMap` or `secret`) in the sidecar.
fn mount_of(d: &Value, source: &str) -> (String, Value) {
    let spec = &d["spec"]["template"]["spec"];
    let v = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v[source].is_object())
        .unwrap_or_else(|| panic!("no {source} volume"));
    let m = sidecar(d)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == v["name"])
        .unwrap_or_else(|| panic!("the {source} volume is not mounted in the sidecar"));
    (
        m["mountPath"].as_str().unwrap().to_owned(),
        v[source].clone(),
    )
}

#[test]
fn the_sidecar_configuration_is_valid_and_fits_the_pod() {
    let d = deployment();
    let cm = yaml(&format!("{DIR}/configmap.yaml"));
    let (config_dir, config_volume) = mount_of(&d, "configMap");
    assert_eq!(config_volume["name"], cm["metadata"]["name"]);
    let args = sidecar(&d)["args"].as_array().unwrap();
    let config_path = format!("{config_dir}/skewwatch.yaml");
    assert!(
        args.windows(2)
            .any(|w| w[0] == "--config" && w[1] == config_path.as_str()),
        "the sidecar runs on {config_path}: {args:?}"
    );
    let text = cm["data"]["skewwatch.yaml"]
        .as_str()
        .expect("data key skewwatch.yaml");
    let cfg: Value = serde_saphyr::from_str(text).unwrap();
    // Prometheus scrapes the pod IP on the named port; StatsD stays inside the pod.
    assert_eq!(cfg["listen"]["http"], "0.0.0.0:9477");
    assert_eq!(cfg["listen"]["statsd"], "127.0.0.1:8125");
    let (token_dir, _) = mount_of(&d, "secret");
    let token_path = cfg["auth"]["bearer_token_file"]
        .as_str()
        .expect("a token file");
    assert!(
        token_path.starts_with(&format!("{token_dir}/")),
        "{token_path} is not in the Secret's mount {token_dir}"
    );

    // The real binary accepts it, with the token file where this test can write one.
    let dir = TempDir::new("deploy");
    let token = dir.0.join("token");
    std::fs::write(&token, "example-token\n").unwrap();
    let file = dir.0.join("skewwatch.yaml");
    std::fs::write(&file, text.replace(token_path, token.to_str().unwrap())).unwrap();
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "skewwatch check-config: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_pod_gives_the_sidecar_time_for_its_final_scrape() {
    // A stopping sidecar waits for one more scrape, up to shutdown.final_scrape_grace_secs
    // from SIGTERM, and exits within the longer of that and GRACE, plus INGEST_DRAIN.
    let cm = yaml(&format!("{DIR}/configmap.yaml"));
    let text = cm["data"]["skewwatch.yaml"].as_str().unwrap();
    let cfg: Value = serde_saphyr::from_str(text).unwrap();
    let grace = cfg["shutdown"]["final_scrape_grace_secs"]
        .as_f64()
        .map(std::time::Duration::from_secs_f64)
        .unwrap_or_else(|| {
            skewwatch::app::Config::embedded()
                .startup
                .shutdown
                .final_scrape_grace
        });
    let needed = grace.max(skewwatch::app::GRACE) + skewwatch::app::INGEST_DRAIN;
    let d = deployment();
    let pod = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_f64()
        .expect("terminationGracePeriodSeconds is set");
    // Room beside it for the application, which a native sidecar outlives.
    assert!(
        pod >= needed.as_secs_f64() + 5.0,
        "terminationGracePeriodSeconds {pod} leaves the sidecar less than the {needed:?} it \
         may take to stop, plus 5 s"
    );
    let pm = yaml(&format!("{DIR}/podmonitor.yaml"));
    let interval = pm["spec"]["podMetricsEndpoints"][0]["interval"]
        .as_str()
        .and_then(|i| i.strip_suffix('s'))
        .and_then(|i| i.parse::<f64>().ok())
        .expect("an interval in seconds");
    assert!(
        grace.as_secs_f64() > interval,
        "the final-scrape grace {grace:?} does not cover one scrape interval ({interval} s)"
    );
}

#[test]
fn the_pod_monitor_scrapes_the_sidecars_metrics_port() {
    let pm = yaml(&format!("{DIR}/podmonitor.yaml"));
    assert_eq!(pm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(pm["kind"], "PodMonitor");
    // Prometheus names the job <namespace>/<name>; the health rules select job=~".*skewwatch.*".
    assert!(
        pm["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.contains("skewwatch"))
    );
    let d = deployment();
    let pod_labels = d["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    let wanted = pm["spec"]["selector"]["matchLabels"].as_object().unwrap();
    assert!(!wanted.is_empty());
    for (k, v) in wanted {
        assert_eq!(pod_labels.get(k), Some(v), "the pods lack the label {k}");
    }
    let endpoints = pm["spec"]["podMetricsEndpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["port"], "metrics");
    assert_eq!(endpoints[0]["path"], "/metrics");
    let allowed = ["port", "path", "interval", "scrapeTimeout"];
    for k in endpoints[0].as_object().unwrap().keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "unexpected endpoint field {k}"
        );
    }
}

#[test]
fn the_kustomization_applies_every_manifest() {
    let k = yaml(&format!("{DIR}/kustomization.yaml"));
    let listed: Vec<String> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{DIR}/{}", r.as_str().unwrap()))
        .collect();
    let mut expected = manifests();
    expected.retain(|m| !m.ends_with("kustomization.yaml"));
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, expected);
}

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    let Some(validate) = tools::require("kubernetes-validate", &[]) else {
        return;
    };
    // 1.29 is the first release with native sidecars on by default; 1.33 made them GA.
    for version in ["1.29.0", "1.33.0"] {
        let out = Command::new(&validate)
            .args(["--strict", "-k", version])
            .args(manifests())
            .current_dir(repo_root())
            .output()
            .unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "Kubernetes {version}:\n{report}");
        assert!(!report.contains("ERROR"), "Kubernetes {version}:\n{report}");
        // Only the custom resources (checked above) and the kustomization lack a schema.
        for line in report
            .lines()
            .filter(|l| l.contains("Couldn't find schema"))
        {
            assert!(
                ["PodMonitor", "PrometheusRule", "Kustomization"]
                    .iter()
                    .any(|k| line.contains(&format!("kind {k} "))),
                "{line}"
            );
        }
    }
}

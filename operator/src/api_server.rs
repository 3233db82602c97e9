//! Finds the API server's endpoint addresses (for the bot pod's NetworkPolicy egress
//! rule) from the EndpointSlices of `default/kubernetes`. Used only when no
//! `--api-server-cidr` is given.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client, api::ListParams};

/// Host CIDRs and the HTTPS port of the API server endpoints in `slices`. Pure.
pub fn cidrs_from_slices(slices: &[EndpointSlice]) -> (Vec<String>, Option<i32>) {
    let mut cidrs = Vec::new();
    let mut port = None;
    for slice in slices {
        let host_bits = if slice.address_type == "IPv6" {
            128
        } else {
            32
        };
        for endpoint in &slice.endpoints {
            for address in &endpoint.addresses {
                cidrs.push(format!("{address}/{host_bits}"));
            }
        }
        for endpoint_port in slice.ports.iter().flatten() {
            if endpoint_port.name.as_deref() == Some("https") || port.is_none() {
                port = endpoint_port.port.or(port);
            }
        }
    }
    cidrs.sort();
    cidrs.dedup();
    (cidrs, port)
}

/// Reads `default/kubernetes` EndpointSlices.
pub async fn discover(client: &Client) -> Result<(Vec<String>, Option<i32>), kube::Error> {
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await?;
    Ok(cidrs_from_slices(&slices.items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_addresses_become_host_cidrs_with_the_https_port() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["172.18.0.2"]}, {"addresses": ["172.18.0.3"]}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }))
        .unwrap();
        assert_eq!(
            cidrs_from_slices(&[slice]),
            (
                vec!["172.18.0.2/32".to_string(), "172.18.0.3/32".to_string()],
                Some(6443)
            )
        );
    }
}

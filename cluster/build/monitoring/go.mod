// The Prometheus Operator's and KEDA's modules, pinned for their CRDs only (nothing is built):
// the conformance suite installs the ServiceMonitor, PrometheusRule and ScaledObject CRDs from
// them to validate what the chart renders for those operators (tests/conformance).
module quartermaster.local/cluster/build/monitoring

go 1.26.0

require (
	github.com/kedacore/keda/v2 v2.21.0
	github.com/prometheus-operator/prometheus-operator v0.85.0
)

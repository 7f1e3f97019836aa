// Command training-operator runs the Kubeflow training operator's v1 controllers and webhooks
// for the local control plane.
//
// Upstream's main always manages its own webhook certificate: it writes a Secret, certificate
// files under a fixed /tmp path and the CA bundle of a webhook configuration that names a
// Service. On loopback the API server calls the webhooks by URL with a certificate that
// scripts/real-cluster made, so this main registers the same reconcilers and webhooks from the
// operator's packages and serves them with the certificate directory it is given.
package main

import (
	"flag"
	"net/http"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	controllerv1 "github.com/kubeflow/training-operator/pkg/controller.v1"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
	"github.com/kubeflow/training-operator/pkg/webhooks"
)

func main() {
	var (
		schemes     controllerv1.EnabledSchemes
		metricsAddr = flag.String("metrics-bind-address", "0", "address of the metrics endpoint (0: off)")
		probeAddr   = flag.String("health-probe-bind-address", "127.0.0.1:8081", "address of /healthz and /readyz")
		webhookHost = flag.String("webhook-host", "127.0.0.1", "address the webhook server listens on")
		webhookPort = flag.Int("webhook-port", 9443, "port of the webhook server")
		certDir     = flag.String("webhook-cert-dir", "", "directory holding tls.crt and tls.key for the webhook server")
		threads     = flag.Int("controller-threads", 1, "worker threads per controller")
		qps         = flag.Int("kube-api-qps", 20, "client QPS towards the API server")
		burst       = flag.Int("kube-api-burst", 30, "client burst towards the API server")
	)
	flag.Var(&schemes, "enable-scheme", "a job kind to run (repeatable, e.g. pytorchjob); all when none is given")
	logOpts := zap.Options{Development: false}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	log := ctrl.Log.WithName("setup")

	// The defaults of upstream's flags for the PyTorch init container (kwok marks it done).
	config.Config.PyTorchInitContainerImage = config.PyTorchInitContainerImageDefault
	config.Config.PyTorchInitContainerTemplateFile = config.PyTorchInitContainerTemplateFileDefault
	config.Config.PyTorchInitContainerMaxTries = config.PyTorchInitContainerMaxTriesDefault
	config.Config.MPIKubectlDeliveryImage = config.MPIKubectlDeliveryImageDefault

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubeflowv1.AddToScheme(scheme))
	utilruntime.Must(volcanov1beta1.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))

	cfg := ctrl.GetConfigOrDie()
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(float32(*qps), *burst)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *probeAddr,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: *webhookHost, Port: *webhookPort, CertDir: *certDir,
		}),
	})
	if err != nil {
		log.Error(err, "unable to create the manager")
		os.Exit(1)
	}

	if schemes.Empty() {
		schemes.FillAll()
	}
	for _, kind := range schemes {
		if err := controllerv1.SupportedSchemeReconciler[kind](mgr, common.GenNonGangSchedulerSetupFunc(), *threads); err != nil {
			log.Error(err, "unable to set up the controller", "kind", kind)
			os.Exit(1)
		}
		if err := webhooks.SupportedSchemeWebhook[kind](mgr); err != nil {
			log.Error(err, "unable to set up the webhook", "kind", kind)
			os.Exit(1)
		}
	}

	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	// Ready once the webhook server listens, so the first PyTorchJob is not refused.
	utilruntime.Must(mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		return mgr.GetWebhookServer().StartedChecker()(req)
	}))

	log.Info("starting manager", "schemes", schemes.String())
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

package preflight

// Release is what one Kubernetes minor removed: a component started with one of these flags,
// admission plugins or feature gates does not start, and objects of a removed API resource can
// no longer be read or written through it.
type Release struct {
	// Minor is the Kubernetes 1.<Minor> that removed the items.
	Minor int
	// Flags are the command-line flags (without the leading --) each component dropped.
	Flags map[Component][]string
	// AdmissionPlugins are the kube-apiserver admission plugins that no longer exist.
	AdmissionPlugins []string
	// FeatureGates are the gates that no longer exist. The control-plane components and the
	// kubelet share the Kubernetes feature gate registry, so a removed gate stops any of them.
	FeatureGates []string
	// Resources are the API resources (group/version/resource) that are no longer served.
	Resources []Resource
	// Sources say where the items were learnt, for docs and for the reader of a refusal.
	Sources []string
}

// Table is the removal data the checks use, one Release per minor (in any order).
type Table []Release

// Coverage is the range of minors Kubernetes() has data for; a path outside it is refused
// (Check returns an error) rather than silently checked against nothing.
const (
	FirstMinor = 25
	LastMinor  = 36
)

// goKubernetes is the list that `talosctl upgrade-k8s` v1.13.9 checks against: go-kubernetes
// v0.2.38, kubernetes/upgrade/checks.go, keyed there by upgrade path ("1.35->1.36"). The data
// below was read from it (and from the changelogs it links); the code is ours.
const goKubernetes = "github.com/siderolabs/go-kubernetes v0.2.38 kubernetes/upgrade/checks.go"

// changelog136 is the Kubernetes v1.36 changelog as shipped in the k8s.io/kubernetes v1.36.3
// module (CHANGELOG/CHANGELOG-1.36.md, "Changelog since v1.35.0").
const changelog136 = "k8s.io/kubernetes v1.36.3 CHANGELOG/CHANGELOG-1.36.md"

// Kubernetes returns the removals of Kubernetes 1.25 to 1.36. Each call returns a fresh table:
// callers (and tests) may extend it without affecting anyone else.
//
// Every kube-apiserver item is checked against the real kube-apiserver v1.36.3 by
// TestApiserverRejectsRemovedItems: that binary refuses each of them.
func Kubernetes() Table {
	return Table{
		{
			Minor: 25,
			Flags: map[Component][]string{
				APIServer:         {"service-account-api-audiences"},
				ControllerManager: {"deleting-pods-qps", "deleting-pods-burst", "register-retry-count"},
			},
			AdmissionPlugins: []string{"PodSecurityPolicy"},
			FeatureGates:     []string{"CSIVolumeFSGroupPolicy", "ConfigurableFSGroupPolicy", "PodDisruptionBudget", "SelectorIndex"},
			Resources:        []Resource{{Group: "policy", Version: "v1beta1", Resource: "podsecuritypolicies"}},
			Sources:          []string{goKubernetes + ` "1.24->1.25"`, "https://kubernetes.io/docs/reference/using-api/deprecation-guide/#v1-25"},
		},
		{
			Minor:        26,
			Flags:        map[Component][]string{APIServer: {"master-service-namespace"}},
			FeatureGates: []string{"DynamicKubeletConfig"},
			Sources:      []string{goKubernetes + ` "1.25->1.26"`},
		},
		{
			Minor: 27,
			Flags: map[Component][]string{
				ControllerManager: {"enable-taint-manager", "pod-eviction-timeout"},
				Kubelet:           {"container-runtime", "master-service-namespace"},
			},
			FeatureGates: []string{
				"ExpandCSIVolumes", "ExpandInUsePersistentVolumes", "ExpandPersistentVolumes",
				"ControllerManagerLeaderMigration", "CSIMigration", "CSIInlineVolume", "EphemeralContainers",
				"LocalStorageCapacityIsolation", "NetworkPolicyEndPort", "StatefulSetMinReadySeconds",
				"IdentifyPodOS", "DaemonSetUpdateSurge",
			},
			Sources: []string{goKubernetes + ` "1.26->1.27"`},
		},
		{
			Minor: 28,
			FeatureGates: []string{
				"AdvancedAuditing", "DelegateFSGroupToCSIDriver", "DevicePlugins", "DisableAcceleratorUsageMetrics",
				"EndpointSliceTerminatingCondition", "CSIStorageCapacity", "CSIMigrationGCE", "KubeletCredentialProviders",
				"MixedProtocolLBService", "ServiceInternalTrafficPolicy", "ServiceIPStaticSubrange", "WindowsHostProcessContainers",
			},
			Sources: []string{goKubernetes + ` "1.27->1.28"`},
		},
		{
			Minor:     29,
			Resources: []Resource{{Group: "networking.k8s.io", Version: "v1alpha1", Resource: "clustercidrs"}},
			Sources:   []string{goKubernetes + ` "1.28->1.29"`},
		},
		{
			Minor:            30,
			AdmissionPlugins: []string{"SecurityContextDeny"},
			FeatureGates: []string{
				"ExpandedDNSConfig", "ExperimentalHostUserNamespaceDefaultingGate", "IPTablesOwnershipCleanup",
				"KubeletPodResources", "KubeletPodResourcesGetAllocatable", "MinimizeIPTablesRestore",
				"ProxyTerminatingEndpoints", "RemoveSelfLink",
			},
			Sources: []string{goKubernetes + ` "1.29->1.30"`},
		},
		{
			Minor: 31,
			Flags: map[Component][]string{
				Kubelet: {"keep-terminated-pod-volumes", "iptables-masquerade-bit", "iptables-drop-bit"},
				ControllerManager: {"volume-host-cidr-denylist", "volume-host-allow-local-loopback",
					"horizontal-pod-autoscaler-upscale-delay", "horizontal-pod-autoscaler-downscale-delay"},
			},
			FeatureGates: []string{
				"APIPriorityAndFairness", "CSINodeExpandSecret", "ConsistentHTTPGetHandlers",
				"DefaultHostNetworkHostPortsInPodTemplates", "ServiceNodePortStaticSubrange", "SkipReadOnlyValidationGCE",
			},
			Sources: []string{goKubernetes + ` "1.30->1.31"`},
		},
		{
			Minor: 32,
			FeatureGates: []string{
				"AllowServiceLBStatusOnNonLB", "CloudDualStackNodeIPs", "DRAControlPlaneController", "HPAContainerMetrics",
				"KMSv2", "KMSv2KDF", "LegacyServiceAccountTokenCleanUp", "MinDomainsInPodTopologySpread",
				"NewVolumeManagerReconstruction", "NodeOutOfServiceVolumeDetach", "ServerSideApply",
				"ServerSideFieldValidation", "StableLoadBalancerNodeSet", "ValidatingAdmissionPolicy",
				"ZeroLimitedNominalConcurrencyShares",
			},
			Resources: []Resource{{Group: "resource.k8s.io", Version: "v1alpha3", Resource: "podschedulingcontexts"}},
			Sources:   []string{goKubernetes + ` "1.31->1.32"`},
		},
		{
			Minor: 33,
			Flags: map[Component][]string{APIServer: {"cloud-config"}},
			FeatureGates: []string{
				"AppArmor", "AppArmorFields", "CPUManager", "DisableCloudProviders", "DisableKubeletCloudCredentialProviders",
				"JobPodFailurePolicy", "KubeProxyDrainingTerminatingNodes", "PDBUnhealthyPodEvictionPolicy",
				"PersistentVolumeLastPhaseTransitionTime", "VolumeCapacityPriority",
			},
			Sources: []string{goKubernetes + ` "1.32->1.33"`},
		},
		{
			Minor:        34,
			Flags:        map[Component][]string{Kubelet: {"cloud-config"}},
			FeatureGates: []string{"DevicePluginCDIDevices", "LegacySidecarContainers", "PodDisruptionConditions"},
			Sources:      []string{goKubernetes + ` "1.33->1.34"`},
		},
		{
			Minor:        35,
			Flags:        map[Component][]string{Kubelet: {"pod-infra-container-image"}},
			FeatureGates: []string{"SizeMemoryBackedVolumes"},
			// go-kubernetes also lists UserNamespacesHostNetworkSupport, which Kubernetes
			// v1.36.3 still defines (pkg/features/kube_features.go) and kube-apiserver v1.36.3
			// accepts (TestApiserverRejectsRemovedItems found this): listing it would refuse
			// upgrades of clusters that use it for nothing.
			Sources: []string{goKubernetes + ` "1.34->1.35"`},
		},
		{
			Minor: 36,
			FeatureGates: []string{"CSIMigrationPortworx", "HonorPVReclaimPolicy", "InTreePluginPortworxUnregister",
				"WatchFromStorageWithoutResourceVersion"},
			// go-kubernetes v0.2.38 marks its 1.36 list as not final; the changelog adds the
			// removal of the scheduling.k8s.io/v1alpha1 Workload API (kubernetes#136976).
			Resources: []Resource{{Group: "scheduling.k8s.io", Version: "v1alpha1", Resource: "workloads"}},
			Sources:   []string{goKubernetes + ` "1.35->1.36"`, changelog136},
		},
	}
}

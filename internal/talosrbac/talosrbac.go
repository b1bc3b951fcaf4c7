// Package talosrbac is Talos's API access table: which client-certificate roles may call which
// gRPC method. It is read from machined's rules (internal/app/machined/pkg/system/services/
// machined.go at v1.13.9; unchanged at v1.14.1 for every method listed here) and the
// authorizer's fallback (pkg/grpc/middleware/authz/authorizer.go: a method not listed needs
// os:admin). The simulator enforces it (sim/access.go) and the plugins check a talosconfig
// against it before they start an operation (plugins/cluster/roles.go), so both read one table.
package talosrbac

import (
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// Full gRPC method names the bot and the simulator use.
const (
	HealthCheck = "/cluster.ClusterService/HealthCheck"

	ImageList = "/machine.ImageService/List"
	ImagePull = "/machine.ImageService/Pull"

	LifecycleInstall = "/machine.LifecycleService/Install"
	LifecycleUpgrade = "/machine.LifecycleService/Upgrade"

	ApplyConfiguration    = "/machine.MachineService/ApplyConfiguration"
	Bootstrap             = "/machine.MachineService/Bootstrap"
	Dmesg                 = "/machine.MachineService/Dmesg"
	EtcdAlarmList         = "/machine.MachineService/EtcdAlarmList"
	EtcdAlarmDisarm       = "/machine.MachineService/EtcdAlarmDisarm"
	EtcdDefragment        = "/machine.MachineService/EtcdDefragment"
	EtcdForfeitLeadership = "/machine.MachineService/EtcdForfeitLeadership"
	EtcdLeaveCluster      = "/machine.MachineService/EtcdLeaveCluster"
	EtcdMemberList        = "/machine.MachineService/EtcdMemberList"
	EtcdRecover           = "/machine.MachineService/EtcdRecover"
	EtcdRemoveMemberByID  = "/machine.MachineService/EtcdRemoveMemberByID"
	EtcdSnapshot          = "/machine.MachineService/EtcdSnapshot"
	EtcdStatus            = "/machine.MachineService/EtcdStatus"
	Events                = "/machine.MachineService/Events"
	Hostname              = "/machine.MachineService/Hostname"
	MachineImageList      = "/machine.MachineService/ImageList"
	MachineImagePull      = "/machine.MachineService/ImagePull"
	Kubeconfig            = "/machine.MachineService/Kubeconfig"
	List                  = "/machine.MachineService/List"
	Logs                  = "/machine.MachineService/Logs"
	LogsContainers        = "/machine.MachineService/LogsContainers"
	Memory                = "/machine.MachineService/Memory"
	Read                  = "/machine.MachineService/Read"
	Reboot                = "/machine.MachineService/Reboot"
	Reset                 = "/machine.MachineService/Reset"
	Restart               = "/machine.MachineService/Restart"
	Rollback              = "/machine.MachineService/Rollback"
	ServiceList           = "/machine.MachineService/ServiceList"
	ServiceRestart        = "/machine.MachineService/ServiceRestart"
	ServiceStart          = "/machine.MachineService/ServiceStart"
	ServiceStop           = "/machine.MachineService/ServiceStop"
	Shutdown              = "/machine.MachineService/Shutdown"
	Upgrade               = "/machine.MachineService/Upgrade"
	Version               = "/machine.MachineService/Version"

	COSICreate  = "/cosi.resource.State/Create"
	COSIDestroy = "/cosi.resource.State/Destroy"
	COSIGet     = "/cosi.resource.State/Get"
	COSIList    = "/cosi.resource.State/List"
	COSIUpdate  = "/cosi.resource.State/Update"
	COSIWatch   = "/cosi.resource.State/Watch"

	Disks = "/storage.StorageService/Disks"
)

// ReadSensitive is not a gRPC method: it stands for a COSI read of a sensitive resource type
// (the machine config), which Talos's resource access policy allows only to os:admin
// (internal/app/resources/access.go).
const ReadSensitive = "read of a sensitive resource (the machine config)"

var (
	anyReader = []role.Role{role.Admin, role.Operator, role.Reader}
	adminOnly = []role.Role{role.Admin}
	adminOp   = []role.Role{role.Admin, role.Operator}
	etcdRead  = []role.Role{role.Admin, role.Operator, role.Reader, role.EtcdBackup}
)

// rules is machined's table for the methods above.
var rules = map[string][]role.Role{
	HealthCheck: anyReader,

	ImageList: anyReader,
	ImagePull: adminOp,

	LifecycleInstall: adminOnly,
	LifecycleUpgrade: adminOnly,

	// Talos lists os:reader too, "for maintenance only, verified in the handler": on a
	// configured node the handler refuses every role but os:admin (v1alpha1_server.go).
	ApplyConfiguration:    adminOnly,
	Bootstrap:             adminOnly,
	Dmesg:                 anyReader,
	EtcdAlarmList:         etcdRead,
	EtcdAlarmDisarm:       adminOp,
	EtcdDefragment:        adminOp,
	EtcdForfeitLeadership: adminOnly,
	EtcdLeaveCluster:      adminOnly,
	EtcdMemberList:        etcdRead,
	EtcdRecover:           adminOnly,
	EtcdRemoveMemberByID:  adminOnly,
	EtcdSnapshot:          {role.Admin, role.Operator, role.EtcdBackup},
	EtcdStatus:            etcdRead,
	Events:                anyReader,
	Hostname:              anyReader,
	MachineImageList:      anyReader,
	MachineImagePull:      adminOp,
	Kubeconfig:            adminOnly,
	List:                  anyReader,
	Logs:                  anyReader,
	LogsContainers:        anyReader,
	Memory:                anyReader,
	Read:                  adminOnly,
	Reboot:                adminOp,
	Reset:                 adminOnly,
	Restart:               adminOp,
	Rollback:              adminOnly,
	ServiceList:           anyReader,
	ServiceRestart:        adminOp,
	ServiceStart:          adminOp,
	ServiceStop:           adminOp,
	Shutdown:              adminOp,
	Upgrade:               adminOnly,
	Version:               anyReader,

	COSICreate:  adminOnly,
	COSIDestroy: adminOnly,
	COSIGet:     anyReader,
	COSIList:    anyReader,
	COSIUpdate:  adminOnly,
	COSIWatch:   anyReader,

	Disks: anyReader,

	ReadSensitive: adminOnly,
}

// Allowed returns the roles that may call method (os:admin alone for one Talos does not list).
func Allowed(method string) role.Set {
	if rs, ok := rules[method]; ok {
		return role.MakeSet(rs...)
	}

	return role.MakeSet(role.Admin)
}

// Permits reports whether a caller holding roles may call method.
func Permits(roles role.Set, method string) bool {
	return Allowed(method).IncludesAny(roles)
}

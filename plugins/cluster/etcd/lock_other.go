//go:build !unix

package etcd

import (
	"context"
	"errors"
)

// lockCluster needs flock(2); without it two runs could snapshot one
// cluster at once, so a snapshot is refused rather than risked.
func lockCluster(context.Context, string, string, func(string)) (func(), error) {
	return nil, errors.New("snapshots need flock(2) to queue runs of one cluster, which this platform lacks; run the bot on Linux or another Unix")
}

package sim

import (
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// List is internal/app/images/images.go List (v1.13.9): every image record of the namespace
// the request names, after what the image GC removed (imagegc.go), with its digest and
// creation time. A pulled image has two records, its tag and its digest reference. The sim has
// no content store, so Size stays 0, as Talos sends it when the size cannot be read.
func (s *imageService) List(req *machineapi.ImageServiceListRequest, srv grpc.ServerStreamingServer[machineapi.ImageServiceListResponse]) error {
	ns, err := containerdNamespace(req.GetContainerd())
	if err != nil {
		return err
	}

	var items []*machineapi.ImageServiceListResponse

	s.n.mu.Lock()
	s.n.collectImages(s.n.c.now())

	for key, img := range s.n.pulledImages {
		ins, pinned, _ := strings.Cut(key, " ")
		if ins != ns {
			continue
		}

		_, digest, _ := strings.Cut(pinned, "@")

		for _, name := range img.names {
			items = append(items, &machineapi.ImageServiceListResponse{Name: name, Digest: digest, CreatedAt: timestamppb.New(img.pulledAt)})
		}
	}
	s.n.mu.Unlock()

	slices.SortFunc(items, func(a, b *machineapi.ImageServiceListResponse) int { return strings.Compare(a.Name, b.Name) })

	for _, it := range items {
		if err := srv.Send(it); err != nil {
			return err
		}
	}

	return nil
}

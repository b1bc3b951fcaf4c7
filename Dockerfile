# talosbot container image: the static bot binary and, next to it, the binary of its
# built-in plugins (talosbot-plugins), on a distroless base, running as non-root.
#
# The Terraform/OpenTofu root and the tofu binary are mounted, not baked in:
#   docker run -v /srv/homelab/terraform:/terraform:ro \
#              -v /usr/local/bin/tofu:/usr/local/bin/tofu:ro \
#              -v /etc/talosbot:/etc/talosbot:ro -v talosbot-data:/var/lib/talosbot \
#              talosbot serve --config /etc/talosbot/talosbot.yaml
# and the config points clusters[].credentials.terraform.root at /terraform.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY bot ./bot
COPY approvals ./approvals
COPY config ./config
COPY state ./state
COPY plugins ./plugins
COPY internal ./internal
ARG VERSION=dev
ARG COMMIT=unknown
# Keep these flags identical to the Makefile's build target (a test checks it, and
# runs this step). Both binaries into one directory: talosbot serve finds
# talosbot-plugins in its own. talosbot-plugins first: talosbot records its sha256
# and starts no other binary as its built-in plugins.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/talosbot/talosbot/internal/version.Version=${VERSION} -X github.com/talosbot/talosbot/internal/version.Commit=${COMMIT}" -o /out/ ./cmd/talosbot-plugins && \
    sum=$(sha256sum /out/talosbot-plugins) && sum=${sum%% *} && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/talosbot/talosbot/internal/version.Version=${VERSION} -X github.com/talosbot/talosbot/internal/version.Commit=${COMMIT} -X github.com/talosbot/talosbot/internal/version.PluginsSHA256=${sum}" -o /out/ ./cmd/talosbot

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/talosbot /out/talosbot-plugins /usr/local/bin/
USER nonroot:nonroot
WORKDIR /var/lib/talosbot
VOLUME ["/var/lib/talosbot"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/talosbot"]
CMD ["serve", "--config", "/etc/talosbot/talosbot.yaml"]

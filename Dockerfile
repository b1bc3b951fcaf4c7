# talosbot container image: the static bot binary and, next to it, the binary of its
# built-in plugins (talosbot-plugins), on a distroless base, running as non-root.
#
# The Terraform/OpenTofu root and the tofu binary are mounted, not baked in:
#   docker run -v /srv/homelab/terraform:/srv/homelab/terraform:ro \
#              -v /usr/local/bin/tofu:/usr/local/bin/tofu:ro \
#              -v /etc/talosbot:/etc/talosbot:ro -v talosbot-data:/var/lib/talosbot \
#              talosbot serve --config /etc/talosbot/talosbot.yaml
# (the Terraform root at the path clusters[].credentials.terraform.root names).
# /etc/talosbot must be readable by 65532: `deploy/install.sh compose` (docs/DEPLOY.md).

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# The plugin SDK is its own module, required through a replace to ./plugins/sdk:
# its go.mod must be in place before the download.
COPY plugins/sdk/go.mod plugins/sdk/go.sum ./plugins/sdk/
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
# The state directory, made here because the runtime image has no shell.
RUN mkdir -m 0700 /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/talosbot /out/talosbot-plugins /usr/local/bin/
# The data directory belongs to the user the bot runs as: WORKDIR alone would
# make it root's, and a new named volume copies that owner, so the bot could
# not create talosbot.db in it (a test checks the owner matches USER).
COPY --from=build --chown=65532:65532 /out/state /var/lib/talosbot
USER 65532:65532
WORKDIR /var/lib/talosbot
VOLUME ["/var/lib/talosbot"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/talosbot"]
CMD ["serve", "--config", "/etc/talosbot/talosbot.yaml"]

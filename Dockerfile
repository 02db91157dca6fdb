# syntax=docker/dockerfile:1
#
# The controller image: `provider-proxmox controller` on Node.js 24, as a non-root user, with only the
# compiled dist/, the production node_modules and package.json.
#
#   docker build -t ghcr.io/sankofa/provider-proxmox:0.1.0 .
#
# Note: there is no Docker daemon on the development machines, so this file has not been built there;
# each step only does what the repository does itself (npm ci, npm run build = node scripts/build.ts, an esbuild bundle).

ARG NODE_VERSION=24

# 1. Build: every dependency (TypeScript, @types/node), then dist/.
FROM node:${NODE_VERSION}-trixie-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: the only install script is the `node` devDependency's, which would download a second
# Node.js 24 binary; this image has one. Its (dangling) bin link goes, so that scripts find the image's node.
RUN npm ci --ignore-scripts --no-audit --no-fund && rm -f node_modules/.bin/node
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.ts ./scripts/
COPY src ./src
RUN npm run build

# 2. Production dependencies only.
FROM node:${NODE_VERSION}-trixie-slim AS deps
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

# 3. Runtime: Node.js and nothing else (no shell, no package manager), user 65532 (nonroot).
FROM gcr.io/distroless/nodejs24-debian13:nonroot
WORKDIR /app
ENV NODE_ENV=production
COPY --from=deps /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY package.json ./
# Numeric, so that Kubernetes can verify runAsNonRoot.
USER 65532:65532
# 8080: /metrics; 8081: /healthz, /readyz.
EXPOSE 8080 8081
# V8 sizes its heap from the machine's memory; on a large host without a limit (test/kube/support.ts
# CONTROLLER_NODE_FLAGS says more): --max-semi-space-size=8, or its young generation grows to 134 MB;
# --heap-growing-percent=20, or the old generation grows to 2-4 times its live objects between full
# GCs, which made the start-up burst of 10,000 resources the peak of the controller's RSS.
ENTRYPOINT ["/nodejs/bin/node", "--max-semi-space-size=8", "--heap-growing-percent=20", "/app/dist/cli/main.js", "controller"]

# levee's container image: built on Debian 13 with the project's own set-up
# script, run from a slim Debian 13 with only the levee binary and the
# shared libraries it links (their packages are found from the binary, so
# the names cannot drift: on Debian 13 they were libyaml-cpp0.8,
# libspdlog1.15, libfmt10 and libprometheus-cpp-core1.0, and tcmalloc's
# package since levee links it).
#
#   podman build --format docker -t levee:0.1.0 .   (or docker build; see scripts/image.sh)
#   podman run -p 8080:8080 -p 9901:9901 -v ./my.yaml:/etc/levee/levee.yaml:ro levee:0.1.0
#
# --format docker keeps the HEALTHCHECK (the OCI format has none).
ARG DEBIAN=debian:trixie
ARG DEBIAN_SLIM=debian:trixie-slim

FROM ${DEBIAN} AS build
WORKDIR /src
COPY . .
# .dockerignore leaves .git out: pass the commit for levee_build_info.
ARG LEVEE_COMMIT=unknown
RUN scripts/deps.sh \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DLEVEE_TESTS=OFF -DLEVEE_BENCH=OFF -DLEVEE_COMMIT="${LEVEE_COMMIT}" \
 && cmake --build /build --target levee -j2 \
 && mkdir -p /out \
 && strip --strip-debug -o /out/levee /build/levee \
 && ldd /out/levee | awk '$3 ~ /^\// {print $3}' | xargs -r realpath | xargs -r dpkg -S \
      | cut -d: -f1 | sort -u | grep -vx 'libc6\|libgcc-s1\|libstdc++6' > /out/runtime-packages \
 && echo "runtime packages:" $(cat /out/runtime-packages)

FROM ${DEBIAN_SLIM}
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(cat /tmp/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /tmp/runtime-packages
COPY --from=build /out/levee /usr/local/bin/levee
# Admin on 0.0.0.0 so /metrics can be scraped from outside the container
# (the admin listener is read-only: /metrics, /healthz, /ready, /admin/clusters).
COPY deploy/container/levee.yaml /etc/levee/levee.yaml
RUN levee --validate /etc/levee/levee.yaml
# Numeric, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 10001:10001
EXPOSE 8080 9901
STOPSIGNAL SIGTERM
# No curl in the image: bash asks /healthz itself.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9901 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && read -r _ code _ <&3 && [ \"$code\" = 200 ]"]
ENTRYPOINT ["/usr/local/bin/levee"]
CMD ["-c", "/etc/levee/levee.yaml"]

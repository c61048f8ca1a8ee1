# levee: build on Debian 12 with the project's own set-up script, then run
# from a slim image with only what the binary links.
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN scripts/deps.sh && cmake --preset release -DLEVEE_TESTS=OFF -DLEVEE_BENCH=OFF \
    && cmake --build --preset release --target levee levee-backend \
    && mkdir -p /out/lib && cp build/levee build/levee-backend /out/ \
    && cp -L .deps/prefix/usr/lib/*/libprometheus-cpp-core.so.1.0 /out/lib/

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libyaml-cpp0.7 libspdlog1.10 libfmt9 libssl3 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/levee /out/levee-backend /usr/local/bin/
COPY --from=build /out/lib/ /usr/local/lib/
COPY config/levee.yaml /etc/levee/levee.yaml
RUN ldconfig && levee --validate /etc/levee/levee.yaml
USER nobody
EXPOSE 8080 9901
ENTRYPOINT ["/usr/local/bin/levee"]
CMD ["-c", "/etc/levee/levee.yaml"]

# An etcd image from Debian's own etcd-server and etcd-client packages, for
# deploy/k8s/rkv.yaml's etcd StatefulSet (any etcd 3.4 or 3.5 image whose
# PATH has etcd does as well). It needs no build context:
#
#   docker build -t rkv-etcd:3.4.23 - < deploy/docker/etcd.Dockerfile
#
# Then push it to the registry the cluster pulls from, under the name the
# manifest gives.

FROM debian:12
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       etcd-server etcd-client \
    && rm -rf /var/lib/apt/lists/*
# The uid and gid deploy/k8s/rkv.yaml runs etcd as.
RUN groupadd --system --gid 10001 rkv-etcd \
    && useradd --system --uid 10001 --gid rkv-etcd --home-dir /var/lib/etcd rkv-etcd \
    && install -d -o rkv-etcd -g rkv-etcd -m 0700 /var/lib/etcd
USER rkv-etcd
WORKDIR /var/lib/etcd
EXPOSE 2379 2380 2381
ENTRYPOINT ["etcd"]

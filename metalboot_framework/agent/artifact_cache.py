"""Partition artifacts (the iPXE ISOs BMCs mount) on the agent: fetched once
from the API (``GET /v1/partitions/{p}/boot-data/artifacts/{iface}/{name}``),
checked against the SHA-256 the API sends, kept under ``[agent]
state_dir``/artifacts and served from there, in ranges, by the boot server.
Their names change with their content (an ISO is named by the hash of what
it is built from), so a file once fetched stays valid."""

import asyncio
import logging
import os
import time

from metalboot_framework.agent import state_files
from metalboot_framework.agent.client import ApiError, NotThere
from metalboot_framework.boot_endpoints import Answer
from metalboot_framework.boot_interface import Artifact
from metalboot_framework.boot_server.cache import MISS
from metalboot_framework.exceptions import Unavailable

LOG = logging.getLogger(__name__)

MISSING_TTL = 5.0  # seconds a 404 of the API is remembered


def _safe(segment):
    return bool(segment) and not segment.startswith(".") and "/" not in segment \
        and "\x00" not in segment


class ArtifactCache:
    """``get((partition, interface, name))``: the artifact's Answer, or None."""

    def __init__(self, client, directory, partitions, interfaces, executor):
        self.client = client
        self.directory = state_files.make_dir(directory)
        self.partitions = set(partitions)
        self.interfaces = interfaces
        self.executor = executor
        self._answers = {}  # key -> Answer
        self._missing = {}  # key -> monotonic time until which it is taken as absent
        self._loading = {}  # key -> future of the load in progress
        self.downloads = 0

    def cached(self, key):
        return self._answers.get(key, MISS)

    async def get(self, key):
        answer = self._answers.get(key)
        if answer is not None:
            return answer
        partition, interface, name = key
        if partition not in self.partitions or interface not in self.interfaces or \
                not (_safe(interface) and _safe(name)):
            return None
        if self._missing.get(key, 0) > time.monotonic():
            return None
        loading = self._loading.get(key)
        if loading is None:
            loading = self._loading[key] = asyncio.get_running_loop().run_in_executor(
                self.executor, self._load, key)
            loading.add_done_callback(lambda _f: self._loading.pop(key, None))
        try:
            answer = await asyncio.shield(loading)
        except NotThere:
            self._missing[key] = time.monotonic() + MISSING_TTL
            return None
        except ApiError as exc:
            raise Unavailable(f"partition artifact {partition}/{interface}/{name} is not "
                              f"cached on this agent and the API cannot give it: {exc}")
        self._answers[key] = answer
        return answer

    def _load(self, key):
        """The cached file's Answer; downloaded first if it is not there."""
        partition, interface, name = key
        directory = state_files.make_dir(os.path.join(self.directory, partition, interface))
        path = os.path.join(directory, name)
        type_path = path + ".content-type"
        if not (os.path.exists(path) and os.path.exists(type_path)):
            content_type = self.client.download(partition, interface, name, path)
            state_files.write_atomically(type_path, content_type.encode())
            self.downloads += 1
            LOG.info("partition artifact %s/%s/%s fetched from the API (%d bytes)",
                     partition, interface, name, os.path.getsize(path))
        with open(type_path, encoding="utf-8") as f:
            content_type = f.read().split(";", 1)[0].strip()  # charset: the server's
        return Answer.of(Artifact(content_type=content_type, path=path), name)

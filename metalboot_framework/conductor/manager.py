"""The conductor process: heartbeat, recovery of stale locks, and the workers."""

import datetime
import logging
import threading

from sqlalchemy import select, update

from metalboot_framework.store import models

LOG = logging.getLogger(__name__)


class Conductor:
    def __init__(self, services):
        self.services = services
        self.conf = services.conf
        self.host = services.conf.host
        self._stop = threading.Event()
        self._threads = []

    def start(self):
        self._register()
        self._spawn(self._heartbeat_loop, "heartbeat")

    def _spawn(self, target, name):
        thread = threading.Thread(target=target, name=f"conductor-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout=10):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        with self.services.db.write() as s:
            s.execute(update(models.Conductor).where(models.Conductor.hostname == self.host)
                      .values(online=False))

    def _register(self):
        """Record this conductor as live; release locks a previous run left behind."""
        now = models.utcnow()
        with self.services.write() as unit:
            s = unit.session
            row = s.get(models.Conductor, self.host)
            if row is None:
                s.add(models.Conductor(hostname=self.host, started_at=now, heartbeat_at=now,
                                       online=True))
            else:
                row.started_at = row.heartbeat_at = now
                row.online = True
            released = s.execute(update(models.Machine)
                                 .where(models.Machine.reservation == self.host)
                                 .values(reservation=None, reserved_at=None)).rowcount
        if released:
            LOG.warning("released %d machine lock(s) left by a previous run of %s",
                        released, self.host)

    def _heartbeat_loop(self):
        interval = self.conf.conductor.heartbeat_interval
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except Exception:
                LOG.exception("heartbeat failed")

    def heartbeat(self):
        """Refresh our heartbeat; release the locks of conductors that died."""
        now = models.utcnow()
        with self.services.db.write() as s:
            s.execute(update(models.Conductor).where(models.Conductor.hostname == self.host)
                      .values(heartbeat_at=now, online=True))
            limit = now - datetime.timedelta(
                seconds=self.conf.conductor.heartbeat_timeout)
            dead = list(s.scalars(select(models.Conductor.hostname).where(
                models.Conductor.heartbeat_at < limit)))
            if dead:
                released = s.execute(update(models.Machine)
                                     .where(models.Machine.reservation.in_(dead))
                                     .values(reservation=None, reserved_at=None)).rowcount
                s.execute(update(models.Conductor).where(models.Conductor.hostname.in_(dead))
                          .values(online=False))
                if released:
                    LOG.warning("released %d lock(s) of dead conductor(s) %s", released,
                                ", ".join(dead))

#!/bin/sh
# Stop and disable memwatch before its files go (also on upgrade: postinstall
# of the new version starts it again). Memory files and archives are the
# agents' and are never touched; the journal stays in /var/lib/memwatch.
set -e
if [ -d /run/systemd/system ]; then
	systemctl stop memwatch.service >/dev/null 2>&1 || true
	systemctl disable memwatch.service >/dev/null 2>&1 || true
fi
exit 0

"""Guest file tree templates: the demo VMs' trees and a generic Linux/Windows tree for the rest."""

from __future__ import annotations

from .content import GeneratedContent
from .guestfs import GuestFs, Partition, build_partition

DAY = 86400.0

NGINX_CONF = """user www-data;
worker_processes auto;
pid /run/nginx.pid;

events {
    worker_connections 768;
}

http {
    sendfile on;
    keepalive_timeout 65;
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /var/log/nginx/access.log;
    error_log /var/log/nginx/error.log;

    server {
        listen 80 default_server;
        root /var/www/html;
        index index.html;
        server_name web01;
        location / {
            try_files $uri $uri/ =404;
        }
    }
}
"""

GRUB_CFG = """set default=0
set timeout=5
menuentry 'Debian GNU/Linux' {
    insmod ext2
    set root='hd0,msdos1'
    linux /vmlinuz root=/dev/sda2 ro quiet
    initrd /initrd.img
}
"""

WEB_CONFIG = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <system.webServer>
    <defaultDocument>
      <files>
        <add value="index.html" />
      </files>
    </defaultDocument>
    <httpErrors errorMode="Custom" />
  </system.webServer>
</configuration>
"""


FSTAB_WITH_BOOT = """# /etc/fstab: static file system information.
# <file system>                           <mount point> <type> <options>         <dump> <pass>
UUID=4f1c2a8e-58f3-4c1e-9d2b-6a1f0e9b7c11 /             ext4   errors=remount-ro 0      1
UUID=0b9e3d27-1f4a-4e55-8c7a-2d6f5a3e9c40 /boot         ext4   defaults          0      2
/swapfile                                 none          swap   sw                0      0
"""


def _hosts(name: str, ip: str) -> str:
    return f"127.0.0.1 localhost\n{ip} {name}.corp.example {name}\n"


def _win_hosts(name: str, ip: str) -> str:
    return f"# Copyright (c) 1993-2009 Microsoft Corp.\r\n127.0.0.1 localhost\r\n{ip} {name}\r\n"


def _seed(vm_seed: int, n: int) -> int:
    return vm_seed * 31 + n


def web01(name: str, ip: str, seed: int, t: float) -> list[Partition]:
    boot = build_partition(
        "partition#1 Ext4",
        "/boot",
        {
            "grub/grub.cfg": GRUB_CFG,
            "vmlinuz": GeneratedContent(7 * 1024 * 1024 + 4242, _seed(seed, 1)),
        },
        t,
    )
    root = build_partition(
        "partition#2 Ext4",
        "/",
        {
            "etc/nginx/nginx.conf": NGINX_CONF,
            "etc/fstab": FSTAB_WITH_BOOT,
            "etc/hostname": f"{name}\n",
            "etc/hosts": _hosts(name, ip),
            "var/www/html/index.html": f"<!doctype html>\n<html><body><h1>{name}</h1></body></html>\n",
            # The site's folder holds several files, some in subfolders: what a folder recovery brings back.
            "var/www/html/404.html": "<!doctype html>\n<html><body><h1>Not found</h1></body></html>\n",
            "var/www/html/css/site.css": "body { font-family: sans-serif; margin: 2em; }\nh1 { color: #036; }\n",
            "var/www/html/js/app.js": "document.addEventListener('DOMContentLoaded', () => console.log('ready'));\n",
            "var/www/html/img/logo.bin": GeneratedContent(3 * 1024 + 7, _seed(seed, 3)),
        },
        t,
        empty_dirs=["boot"],
    )
    return [boot, root]


def app01(name: str, ip: str, seed: int, t: float) -> list[Partition]:
    return [
        build_partition(
            "partition#1 XFS",
            "/",
            {
                "etc/app/app.conf": "[server]\nport = 8080\nworkers = 4\n\n[database]\nhost = db01\nname = app\n",
                "etc/hostname": f"{name}\n",
                "etc/hosts": _hosts(name, ip),
            },
            t,
            empty_dirs=["boot", "tmp"],
        )
    ]


def db01(name: str, ip: str, seed: int, t: float) -> list[Partition]:
    return [
        build_partition(
            "partition#1 Ext4",
            "/",
            {
                "etc/my.cnf": "[mysqld]\ndatadir=/var/lib/mysql\nsocket=/var/lib/mysql/mysql.sock\n"
                "max_connections=200\ninnodb_buffer_pool_size=1G\n",
                "etc/hostname": f"{name}\n",
                "etc/hosts": _hosts(name, ip),
                "var/lib/mysql/ibdata1": GeneratedContent(12 * 1024 * 1024, _seed(seed, 2)),
            },
            t,
            empty_dirs=["boot"],
        )
    ]


def win01(name: str, ip: str, seed: int, t: float) -> list[Partition]:
    reserved = build_partition(
        "partition#1 NTFS",
        None,
        {
            "bootmgr": GeneratedContent(404_250, _seed(seed, 1)),
            "Boot/BCD": GeneratedContent(32_768, _seed(seed, 2)),
        },
        t,
    )
    c_drive = build_partition(
        "partition#2 NTFS",
        "C:",
        {
            "inetpub/web.config": WEB_CONFIG,
            "inetpub/wwwroot/index.html": f"<html><body>{name}</body></html>\r\n",
            "inetpub/wwwroot/Web.config": WEB_CONFIG,
            "Windows/System32/drivers/etc/hosts": _win_hosts(name, ip),
        },
        t,
        empty_dirs=["Users", "Program Files"],
    )
    d_drive = build_partition(
        "partition#3 NTFS",
        "D:",
        {
            "data/report.csv": "date,region,amount\r\n2025-01-01,emea,1200\r\n2025-01-02,amer,800\r\n",
        },
        t,
    )
    return [reserved, c_drive, d_drive]


def generic_linux(name: str, ip: str, seed: int, t: float) -> list[Partition]:
    boot = build_partition("partition#1 Ext4", "/boot", {"grub/grub.cfg": GRUB_CFG}, t)
    root = build_partition(
        "partition#2 Ext4",
        "/",
        {
            "etc/hostname": f"{name}\n",
            "etc/hosts": _hosts(name, ip),
            "etc/fstab": FSTAB_WITH_BOOT,
            "etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n',
            "opt/app/config.yaml": f"service: {name}\nreplicas: {1 + seed % 3}\nlisten: 0.0.0.0:8080\n",
        },
        t,
        empty_dirs=["boot", "tmp"],
    )
    return [boot, root]


def generic_windows(name: str, ip: str, seed: int, t: float) -> list[Partition]:
    reserved = build_partition(
        "partition#1 NTFS",
        None,
        {
            "bootmgr": GeneratedContent(404_250, _seed(seed, 1)),
        },
        t,
    )
    c_drive = build_partition(
        "partition#2 NTFS",
        "C:",
        {
            "Windows/System32/drivers/etc/hosts": _win_hosts(name, ip),
            "ProgramData/App/app.ini": f"[service]\r\nname={name}\r\nport=8080\r\n",
        },
        t,
        empty_dirs=["Users"],
    )
    return [reserved, c_drive]


TEMPLATES = {
    "web01": (web01, "linux"),
    "app01": (app01, "linux"),
    "db01": (db01, "linux"),
    "win01": (win01, "windows"),
    "linux": (generic_linux, "linux"),
    "windows": (generic_windows, "windows"),
}


def build_tree(template: str, name: str, ip: str, seed: int, epoch: float) -> GuestFs:
    """The pristine tree; file times sit a month before the simulator started."""
    make, os_type = TEMPLATES[template]
    return GuestFs(os_type, make(name, ip, seed, epoch - 30 * DAY))

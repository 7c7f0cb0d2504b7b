"""The physical floor of a proxy on this path (bench/egress/README.md): a plain TCP forwarder
with no policy, no parsing and no records, moving bytes with splice() through a 1 MiB pipe per
direction on blocking sockets, one thread per direction. Whatever it costs over the direct
download is the second loopback hop itself, which any proxy in the path pays.

    python3 floor.py LISTEN_PORT UPSTREAM_ADDR UPSTREAM_PORT      (prints "ready")
"""
import fcntl
import os
import socket
import sys
import threading

F_SETPIPE_SZ = 1031
CHUNK = 1 << 20


def pump(src, dst):
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, CHUNK)
    except OSError:
        pass
    try:
        while True:
            n = os.splice(src.fileno(), w, CHUNK)
            if n == 0:
                break
            while n > 0:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(client, upstream_addr):
    up = socket.create_connection(upstream_addr)
    t = threading.Thread(target=pump, args=(client, up), daemon=True)
    t.start()
    pump(up, client)
    t.join()
    client.close()
    up.close()


def main():
    port, addr, uport = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", port))
    lst.listen(64)
    print("ready", flush=True)
    while True:
        c, _ = lst.accept()
        threading.Thread(target=serve, args=(c, (addr, uport)), daemon=True).start()


if __name__ == "__main__":
    main()

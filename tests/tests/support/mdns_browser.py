"""An mDNS/DNS-SD browser servery's code has no part in (python-zeroconf): prints one
JSON object per event on stdout, `{"event": "Added"|"Updated"|"Removed", "type", "name",
"port", "txt"}`, after a first `{"event": "browsing"}`. Arguments: the service types.
Stops by itself after 180 s."""
import json
import sys
import time

from zeroconf import ServiceBrowser, ServiceStateChange, Zeroconf


def main():
    types = sys.argv[1:]
    zc = Zeroconf(interfaces=["127.0.0.1"])

    def on_change(zeroconf, service_type, name, state_change):
        event = {"event": state_change.name, "type": service_type, "name": name}
        if state_change != ServiceStateChange.Removed:
            info = zeroconf.get_service_info(service_type, name, 2000)
            if info is not None:
                event["port"] = info.port
                event["txt"] = {
                    k.decode(): (v.decode() if v is not None else None)
                    for k, v in info.properties.items()
                }
        print(json.dumps(event), flush=True)

    ServiceBrowser(zc, types, handlers=[on_change])
    print(json.dumps({"event": "browsing"}), flush=True)
    try:
        time.sleep(180)
    finally:
        zc.close()


if __name__ == "__main__":
    main()

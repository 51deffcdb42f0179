// Command null_extender_go is the extender protocol's floor with no Python in it: an HTTP extender in Go that
// decides nothing (every node asked passes filter, every score is 0), for bench/e2e_bench.py --floor.
//
// bench/null_extender.py gives the same answers under our own server (transport/server.py), so the two floors
// side by side tell what our server's request handling costs kube-scheduler from what any extender costs it:
// kube-scheduler's JSON encoding of the pod and the node names, its decoding of the answers, the loopback HTTP
// round trips and the thread wake-ups (pkg/scheduler/extender.go HTTPExtender.send, Filter, Prioritize).
//
// The request is read as kube-scheduler sends it (ExtenderArgs with NodeNames: nodeCacheCapable). The node names
// are picked out of the body by scanning for the NodeNames array rather than decoding the whole ExtenderArgs:
// encoding/json's reflection over the pod and ~1000 names costs more than orjson does in our server (a quiet
// loop at 1000 nodes: 1.77 ms per filter+prioritize pair with encoding/json against 1.44 ms for our server),
// and the floor is meant to be the cheapest answer there is. Names are DNS subdomains (no escapes); a body with
// a backslash in the array, or without the array, falls back to encoding/json. The answers are the shapes
// HTTPExtender decodes: ExtenderFilterResult with NodeNames, and HostPriorityList. A test harness, built by
// the bench into a gitignored directory; not part of the product.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
)

type extenderArgs struct {
	NodeNames []string
}

func readNames(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if names, ok := scanNames(body); ok {
		return names, true
	}
	var args extenderArgs
	if err := json.Unmarshal(body, &args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return args.NodeNames, true
}

var nodeNamesKey = []byte(`"NodeNames":`)

// scanNames reads the NodeNames array of plain strings; false when the body is anything else.
func scanNames(body []byte) ([]string, bool) {
	at := bytes.Index(body, nodeNamesKey)
	if at < 0 {
		return nil, false
	}
	rest := bytes.TrimLeft(body[at+len(nodeNamesKey):], " \t\r\n")
	if len(rest) == 0 || rest[0] != '[' {
		return nil, false
	}
	names := make([]string, 0, bytes.Count(rest, []byte{','})+1)
	rest = rest[1:]
	for {
		rest = bytes.TrimLeft(rest, " \t\r\n,")
		if len(rest) == 0 {
			return nil, false
		}
		if rest[0] == ']' {
			return names, true
		}
		if rest[0] != '"' {
			return nil, false
		}
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 || bytes.IndexByte(rest[1:1+end], '\\') >= 0 {
			return nil, false
		}
		names = append(names, string(rest[1:1+end]))
		rest = rest[2+end:]
	}
}

func writeJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// appendName appends a node name as a JSON string: quoted as it is when it needs no escaping (a DNS subdomain
// never does), through json.Marshal otherwise.
func appendName(out []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			quoted, _ := json.Marshal(name)
			return append(out, quoted...)
		}
	}
	out = append(out, '"')
	out = append(out, name...)
	return append(out, '"')
}

func filter(w http.ResponseWriter, r *http.Request) {
	names, ok := readNames(w, r)
	if !ok {
		return
	}
	out := make([]byte, 0, 16*len(names)+64)
	out = append(out, `{"NodeNames":[`...)
	for i, name := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendName(out, name)
	}
	out = append(out, `],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}`...)
	writeJSON(w, out)
}

func prioritize(w http.ResponseWriter, r *http.Request) {
	names, ok := readNames(w, r)
	if !ok {
		return
	}
	out := make([]byte, 0, 32*len(names)+2)
	out = append(out, '[')
	for i, name := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"Host":`...)
		out = appendName(out, name)
		out = append(out, `,"Score":0}`...)
	}
	out = append(out, ']')
	writeJSON(w, out)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: null_extender_go HOST:PORT")
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", filter)
	mux.HandleFunc("/prioritize", prioritize)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, []byte(`"ok"`)) })
	log.Fatal(http.ListenAndServe(os.Args[1], mux))
}

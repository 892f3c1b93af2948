// Command kadm_quotas drives franz-go's kadm client-quota functions (ValidateAlterClientQuotas,
// AlterClientQuotas, DescribeClientQuotas) against one bootstrap and prints what they return, one
// JSON line per call, so that the same run against a broker and against quotagate can be compared
// (tests/integration/test_quota_admin_go_clients.py). kadm ships no client-quota tests of its own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type line struct {
	Call    string   `json:"call"`
	Error   string   `json:"error,omitempty"`
	Results []string `json:"results"`
}

func name(s string) *string { return &s }

func user(n string) kadm.ClientQuotaEntityComponent {
	return kadm.ClientQuotaEntityComponent{Type: "user", Name: name(n)}
}
func client(n string) kadm.ClientQuotaEntityComponent {
	return kadm.ClientQuotaEntityComponent{Type: "client-id", Name: name(n)}
}
func set(key string, value float64) kadm.AlterClientQuotaOp {
	return kadm.AlterClientQuotaOp{Key: key, Value: value}
}
func remove(key string) kadm.AlterClientQuotaOp {
	return kadm.AlterClientQuotaOp{Key: key, Remove: true}
}

func altered(as kadm.AlteredClientQuotas, err error) line {
	l := line{Results: []string{}}
	if err != nil {
		l.Error = err.Error()
	}
	for _, a := range as {
		e := "ok"
		if a.Err != nil {
			e = a.Err.Error()
		}
		l.Results = append(l.Results, fmt.Sprintf("%s %s %q", a.Entity, e, a.ErrMessage))
	}
	return l
}

func described(qs kadm.DescribedClientQuotas, err error) line {
	l := line{Results: []string{}}
	if err != nil {
		l.Error = err.Error()
	}
	for _, q := range qs {
		l.Results = append(l.Results, fmt.Sprintf("%s %v", q.Entity, q.Values))
	}
	sort.Strings(l.Results) // several entries come in the order of every entity each side holds
	return l
}

func main() {
	bootstrap := flag.String("bootstrap", "", "host:port")
	run := flag.String("run", "", "suffix that makes this run's entity names unique")
	flag.Parse()
	cl, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap), kgo.ClientID("kadm-quotas"))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := json.NewEncoder(os.Stdout)
	emit := func(call string, l line) {
		l.Call = call
		if err := out.Encode(l); err != nil {
			panic(err)
		}
	}
	u, v := "kadm-u-"+*run, "kadm-v-"+*run
	validations := map[string][]kadm.AlterClientQuotaEntry{
		"user and client-id":  {{Entity: kadm.ClientQuotaEntity{user(u), client("c1")}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 1024)}}},
		"client-id twice":     {{Entity: kadm.ClientQuotaEntity{user(u), client("a"), client("b")}, Ops: []kadm.AlterClientQuotaOp{set("consumer_byte_rate", 2048)}}},
		"default user":        {{Entity: kadm.ClientQuotaEntity{{Type: "user"}}, Ops: []kadm.AlterClientQuotaOp{set("request_percentage", 25)}}},
		"zero":                {{Entity: kadm.ClientQuotaEntity{user(u)}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 0)}}},
		"negative":            {{Entity: kadm.ClientQuotaEntity{user(u)}, Ops: []kadm.AlterClientQuotaOp{set("consumer_byte_rate", -1)}}},
		"fractional":          {{Entity: kadm.ClientQuotaEntity{user(u)}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 10.5)}}},
		"too large":           {{Entity: kadm.ClientQuotaEntity{user(u)}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", math.Pow(2, 64))}}},
		"unknown key":         {{Entity: kadm.ClientQuotaEntity{user(u)}, Ops: []kadm.AlterClientQuotaOp{set("bogus_rate", 1)}}},
		"unknown key removed": {{Entity: kadm.ClientQuotaEntity{user(u)}, Ops: []kadm.AlterClientQuotaOp{remove("bogus_rate")}}},
		"a key twice":         {{Entity: kadm.ClientQuotaEntity{user(u)}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 1), set("producer_byte_rate", 2)}}},
		"unknown type":        {{Entity: kadm.ClientQuotaEntity{{Type: "group", Name: name("g")}}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 1)}}},
	}
	names := make([]string, 0, len(validations))
	for n := range validations {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		emit("validate "+n, altered(adm.ValidateAlterClientQuotas(ctx, validations[n])))
	}
	emit("alter", altered(adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{user(u), client("c1")}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 1024), set("request_percentage", 50)}},
		{Entity: kadm.ClientQuotaEntity{user(v)}, Ops: []kadm.AlterClientQuotaOp{set("consumer_byte_rate", 4096)}},
	})))
	filters := map[string][]kadm.DescribeClientQuotaComponent{
		"user exact":            {{Type: "user", MatchName: name(u), MatchType: 0}},
		"user and client exact": {{Type: "user", MatchName: name(u), MatchType: 0}, {Type: "client-id", MatchName: name("c1"), MatchType: 0}},
		"other user":            {{Type: "user", MatchName: name(v), MatchType: 0}},
		"bad match type":        {{Type: "user", MatchType: 7}},
	}
	// The broker applies an alteration through its metadata log: describe once it shows.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		qs, err := adm.DescribeClientQuotas(ctx, false, filters["other user"])
		if err == nil && len(qs) == 1 {
			break
		}
	}
	fnames := make([]string, 0, len(filters))
	for n := range filters {
		fnames = append(fnames, n)
	}
	sort.Strings(fnames)
	for _, strict := range []bool{false, true} {
		for _, n := range fnames {
			emit(fmt.Sprintf("describe %s strict=%v", n, strict), described(adm.DescribeClientQuotas(ctx, strict, filters[n])))
		}
	}
	emit("remove", altered(adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{user(u), client("c1")}, Ops: []kadm.AlterClientQuotaOp{remove("producer_byte_rate"), remove("request_percentage")}},
		{Entity: kadm.ClientQuotaEntity{user(v)}, Ops: []kadm.AlterClientQuotaOp{remove("consumer_byte_rate")}},
	})))
}

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestDashboardQueries(t *testing.T) {
	d, err := ParseDashboard([]byte(`{"title":"t","panels":[
		{"id":1,"type":"row","title":"open row","panels":[]},
		{"id":2,"type":"timeseries","title":"a","targets":[{"refId":"A","expr":"up"},{"refId":"B","expr":"sum(up)"}]},
		{"id":3,"type":"row","title":"collapsed","collapsed":true,"panels":[
			{"id":4,"type":"stat","title":"b","targets":[{"refId":"A","expr":"count(up)"}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range q {
		got = append(got, x.Panel+" "+x.RefID+" "+x.Expr)
	}
	if want := []string{"a A up", "a B sum(up)", "b A count(up)"}; !slices.Equal(got, want) {
		t.Errorf("queries %q, want %q", got, want)
	}
	for name, tc := range map[string]struct{ json, want string }{
		"a panel without a query": {`{"panels":[{"id":7,"type":"timeseries","title":"empty"}]}`, `panel 7 "empty" has no query`},
		"a query without an expr": {`{"panels":[{"id":8,"type":"timeseries","title":"blank","targets":[{"refId":"A","expr":" "}]}]}`, `panel 8 "blank": query A has no expr`},
		"no panel":                {`{"panels":[]}`, "no query"},
	} {
		d, err := ParseDashboard([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Queries(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	if _, err := ParseDashboard([]byte(`{"panels":`)); err == nil {
		t.Error("ParseDashboard accepted broken JSON")
	}
}

func TestDashboardVariables(t *testing.T) {
	d, err := ParseDashboard([]byte(`{"templating":{"list":[
		{"name":"datasource","type":"datasource","query":"prometheus"},
		{"name":"namespace","type":"query","includeAll":true,"allValue":".+"},
		{"name":"pod","type":"query","includeAll":true},
		{"name":"quantile","type":"custom","current":{"value":"0.99"}},
		{"name":"kinds","type":"custom","current":{"value":["dwell","end_to_end"]}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := d.Variables("10s")
	want := map[string]string{"__rate_interval": "10s", "namespace": ".+", "pod": ".*", "quantile": "0.99", "kinds": "dwell"}
	if len(got) != len(want) {
		t.Errorf("variables %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("$%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestExpandExpr(t *testing.T) {
	vars := map[string]string{"__rate_interval": "10s", "namespace": ".+"}
	for _, tc := range []struct {
		expr, want, err string
	}{
		{`rate(x{namespace=~"$namespace"}[$__rate_interval])`, `rate(x{namespace=~".+"}[10s])`, ""},
		{`rate(x{namespace=~"${namespace}"}[${__rate_interval}])`, `rate(x{namespace=~".+"}[10s])`, ""},
		{`x{namespace=~"${namespace:regex}"}`, `x{namespace=~".+"}`, ""},
		{`x{namespace=~"[[namespace]]"}`, `x{namespace=~".+"}`, ""},
		{`label_replace(up, "a", "$1", "b", "(.*)")`, `label_replace(up, "a", "$1", "b", "(.*)")`, ""},
		{`x{pod=~"$pod"}`, "", "unknown variable(s) $pod"},
	} {
		got, err := ExpandExpr(tc.expr, vars)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ExpandExpr(%s) = %q, %v; want an error with %q", tc.expr, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ExpandExpr(%s) = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
}

// The chart's dashboard ConfigMap is what the observability story reads
// (its label and key), its dashboard parses, every panel has a query, every query
// expands with the values the observability story gives its variables,
// and every weighstation metric it reads is one the sources define: a
// renamed metric fails here rather than on a cluster.
func TestTheChartsDashboard(t *testing.T) {
	if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); err != nil {
		t.Skip("not run from test/e2e of the source tree (a copied test binary)")
	}
	// The ConfigMap the story looks for: its label, and its key.
	tmpl, err := os.ReadFile(filepath.Join(repoRoot, "charts", "weighstation", "templates", "dashboard", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{DashboardLabel + `: "1"`, DashboardKey + ": |-", `.Files.Get "dashboards/` + DashboardKey + `"`} {
		if !strings.Contains(string(tmpl), want) {
			t.Errorf("the chart's dashboard ConfigMap template lacks %s", want)
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "charts", "weighstation", "dashboards", DashboardKey))
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDashboard(b)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := d.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	for _, pattern := range []string{"sidecar/metrics.go", "broker/metrics.go", "controllers/*/metrics.go"} {
		files, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v", pattern, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sources.Write(b)
		}
	}
	metric := regexp.MustCompile(`weighstation_[a-z_]+`)
	vars := d.Variables("10s")
	for _, q := range queries {
		if _, err := ExpandExpr(q.Expr, vars); err != nil {
			t.Errorf("%s: %v", q, err)
		}
		for _, name := range metric.FindAllString(q.Expr, -1) {
			// A summary's series are its name with _sum and _count.
			base := strings.TrimSuffix(strings.TrimSuffix(name, "_sum"), "_count")
			if !strings.Contains(sources.String(), `"`+base+`"`) {
				t.Errorf("%s reads %s, which no metrics.go defines", q, name)
			}
		}
	}
}

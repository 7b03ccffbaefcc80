package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// The chart's Grafana dashboard: a ConfigMap labelled grafana_dashboard
// (charts/weighstation/templates/dashboard/configmap.yaml) whose data
// holds the dashboard's JSON (charts/weighstation/dashboards).
const (
	DashboardLabel = "grafana_dashboard"
	DashboardKey   = "weighstation.json"
)

// Dashboard is what the stories read of a Grafana dashboard: its panels'
// queries and its template variables.
type Dashboard struct {
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel; a row holds its panels when collapsed.
type Panel struct {
	ID      int           `json:"id"`
	Type    string        `json:"type"`
	Title   string        `json:"title"`
	Targets []PanelTarget `json:"targets"`
	Panels  []Panel       `json:"panels"`
}

// PanelTarget is one query of a panel.
type PanelTarget struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// Variable is a template variable: the stories query with "All" where a
// variable has it (its allValue), else with its current value.
type Variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
	Current    struct {
		Value any `json:"value"`
	} `json:"current"`
}

// PanelQuery is one query of the dashboard, with its panel's title.
type PanelQuery struct {
	Panel string
	RefID string
	Expr  string
}

func (q PanelQuery) String() string { return fmt.Sprintf("%q %s", q.Panel, q.RefID) }

// ParseDashboard reads a dashboard's JSON.
func ParseDashboard(data []byte) (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return Dashboard{}, fmt.Errorf("the dashboard's JSON: %w", err)
	}
	return d, nil
}

// Queries are every query of every panel but rows, rows' panels
// included, in the dashboard's order. A panel without a query, or a query
// without an expression, is an error: it would show nothing.
func (d Dashboard) Queries() ([]PanelQuery, error) {
	var out []PanelQuery
	var errs []error
	var walk func([]Panel)
	walk = func(panels []Panel) {
		for _, p := range panels {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("panel %d %q has no query", p.ID, p.Title))
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					errs = append(errs, fmt.Errorf("panel %d %q: query %s has no expr", p.ID, p.Title, t.RefID))
					continue
				}
				out = append(out, PanelQuery{Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
			}
		}
	}
	walk(d.Panels)
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("the dashboard has no query"))
	}
	return out, errors.Join(errs...)
}

// Variables are the values the stories give the dashboard's query
// variables: All (allValue, or .* without one) where a variable offers it,
// else its current value. Data source variables are left out: no query
// names one. rateInterval is Grafana's $__rate_interval.
func (d Dashboard) Variables(rateInterval string) map[string]string {
	vars := map[string]string{"__rate_interval": rateInterval}
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			continue
		}
		switch {
		case v.IncludeAll && v.AllValue != "":
			vars[v.Name] = v.AllValue
		case v.IncludeAll:
			vars[v.Name] = ".*"
		default:
			vars[v.Name] = fmt.Sprint(firstValue(v.Current.Value))
		}
	}
	return vars
}

func firstValue(v any) any {
	if list, ok := v.([]any); ok && len(list) > 0 {
		return list[0]
	}
	return v
}

// grafanaVariable matches Grafana's variable syntaxes in a query: $name,
// ${name} (with an optional :format, ignored) and [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]|\$([A-Za-z_]\w*)`)

// ExpandExpr replaces the Grafana variables of expr with vars, as Grafana
// does before it sends the query; a variable vars lacks is an error (the
// query would reach Prometheus with a $ in it).
func ExpandExpr(expr string, vars map[string]string) (string, error) {
	var unknown []string
	out := grafanaVariable.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVariable.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, m)
			return m
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("query %q: unknown variable(s) %s", expr, strings.Join(unknown, ", "))
	}
	return out, nil
}

package dbusapi

import (
	"fmt"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"
)

// argIn, argOut and sigArg describe a method's input and output
// arguments and a signal's arguments.
func argIn(name, typ string) introspect.Arg {
	return introspect.Arg{Name: name, Type: typ, Direction: "in"}
}

func argOut(name, typ string) introspect.Arg {
	return introspect.Arg{Name: name, Type: typ, Direction: "out"}
}

func sigArg(name, typ string) introspect.Arg {
	return introspect.Arg{Name: name, Type: typ}
}

// methodsIntrospection describes the methods of object with argument
// names (introspect.Methods would leave them unnamed).
var methodsIntrospection = []introspect.Method{
	{Name: "Status", Args: []introspect.Arg{argOut("json", "s")}},
	{Name: "Arm", Args: []introspect.Arg{
		argIn("device", "s"), argIn("qpn", "u"), argIn("port", "y"), argIn("all", "b"),
		argOut("result_json", "s"),
	}},
	{Name: "Migrate", Args: []introspect.Arg{
		argIn("device", "s"), argIn("qpn", "u"), argIn("port", "y"), argIn("all", "b"), argIn("dry_run", "b"),
		argOut("result_json", "s"),
	}},
}

// pathSignalArgs are the arguments of PathMigrated, Failover and
// Switchback.
var pathSignalArgs = []introspect.Arg{
	sigArg("device", "s"), sigArg("qpn", "u"), sigArg("from", "s"), sigArg("to", "s"), sigArg("reason", "s"),
}

var signalsIntrospection = []introspect.Signal{
	{Name: SignalPathMigrated, Args: pathSignalArgs},
	{Name: SignalFailover, Args: pathSignalArgs},
	{Name: SignalSwitchback, Args: pathSignalArgs},
	{Name: SignalPortStateChanged, Args: []introspect.Arg{
		sigArg("device", "s"), sigArg("port", "y"), sigArg("from", "s"), sigArg("to", "s"),
	}},
}

// introspection is the introspection data of Path: the facade's interface
// with the properties p holds, Properties and Introspectable.
func introspection(p *prop.Properties) *introspect.Node {
	props := p.Introspection(Interface)
	slices.SortFunc(props, func(a, b introspect.Property) int {
		return slices.Index(propNames, a.Name) - slices.Index(propNames, b.Name)
	})
	return &introspect.Node{
		Name: string(Path),
		Interfaces: []introspect.Interface{
			introspect.IntrospectData,
			prop.IntrospectData,
			{
				Name:       Interface,
				Methods:    methodsIntrospection,
				Properties: props,
				Signals:    signalsIntrospection,
			},
		},
	}
}

// exportIntrospection exports the introspection data of Path, and of each
// of its parents a node that names only its child, so that tools that walk
// the tree from / (busctl tree) find the object.
func exportIntrospection(conn *dbus.Conn, p *prop.Properties) error {
	if err := conn.Export(introspect.NewIntrospectable(introspection(p)), Path, ifaceIntrospection); err != nil {
		return fmt.Errorf("export introspection of %s: %w", Path, err)
	}
	parts := strings.Split(strings.TrimPrefix(string(Path), "/"), "/")
	for i := range parts {
		parent := "/" + strings.Join(parts[:i], "/")
		n := &introspect.Node{Children: []introspect.Node{{Name: parts[i]}}}
		if err := conn.Export(introspect.NewIntrospectable(n), dbus.ObjectPath(parent), ifaceIntrospection); err != nil {
			return fmt.Errorf("export introspection of %s: %w", parent, err)
		}
	}
	return nil
}

package meshconfig

// applyFileDefaults fills in what a checked document leaves out, so that a
// file means what the cluster would make of the same Topics and
// Subscriptions:
//
//   - no default block: the operator's default policy (DefaultPolicy),
//     quota included; a default block gets DefaultPolicy's subject, size
//     and stamp for the keys it leaves out, and, like a Topic, no quota
//     unless it gives a publishRate (files written before these defaults
//     gave none and meant none);
//   - a Topic: maxMessageBytes and stampHeader as the CRD's defaults, and
//     mayPublish true, as for a Topic without a publishers selector;
//   - a Subscription: essential, limits and killSwitch.auto's window and
//     cooldown as the CRD's defaults;
//   - access: mode enforce, as without the access-mode annotation.
//
// Values of the wrong type were refused before, so a type assertion that
// fails here means the key was not given as an object: it is left alone.
func applyFileDefaults(root map[string]any) {
	if _, given := root["default"]; !given {
		if r := RateOrNil(DefaultPolicy.PublishRate); r != nil {
			root["default"] = map[string]any{"publishRate": map[string]any{
				"messagesPerSecond": r.MessagesPerSecond, "messagesBurst": r.MessagesBurst,
				"bytesPerSecond": r.BytesPerSecond, "bytesBurst": r.BytesBurst,
			}}
		}
	}
	def := objectAt(root, "default")
	setDefault(def, "subject", ">")
	setDefault(def, "maxMessageBytes", DefaultPolicy.MaxMessageBytes)
	setDefault(def, "mayPublish", true)
	setDefault(def, "stampHeader", DefaultPolicy.StampHeader)
	for _, t := range objectsAt(root, "topics") {
		setDefault(t, "maxMessageBytes", DefaultTopicMaxMessageBytes)
		setDefault(t, "mayPublish", true)
		setDefault(t, "stampHeader", DefaultTopicStampHeader)
	}
	for _, s := range objectsAt(root, "subscriptions") {
		setDefault(s, "essential", DefaultSubscriptionEssential)
		limits := objectAt(s, "limits")
		setDefault(limits, "maxPendingMessages", DefaultMaxPendingMessages)
		setDefault(limits, "maxPendingBytes", DefaultMaxPendingBytes)
		setDefault(limits, "overflow", DefaultOverflow)
		if ks, ok := s["killSwitch"].(map[string]any); ok {
			if auto, ok := ks["auto"].(map[string]any); ok {
				setDefault(auto, "windowMillis", DefaultKillSwitchWindowMillis)
				setDefault(auto, "cooldownMillis", DefaultKillSwitchCooldownMillis)
			}
		}
	}
	setDefault(objectAt(root, "access"), "mode", AccessEnforce)
}

func setDefault(m map[string]any, key string, value any) {
	if _, ok := m[key]; !ok {
		m[key] = value
	}
}

// objectAt returns m[key], made an empty object when it is missing.
func objectAt(m map[string]any, key string) map[string]any {
	if o, ok := m[key].(map[string]any); ok {
		return o
	}
	o := map[string]any{}
	if _, given := m[key]; !given {
		m[key] = o
	}
	return o
}

// objectsAt returns the objects of the list m[key].
func objectsAt(m map[string]any, key string) []map[string]any {
	l, _ := m[key].([]any)
	out := make([]map[string]any, 0, len(l))
	for _, x := range l {
		if o, ok := x.(map[string]any); ok {
			out = append(out, o)
		}
	}
	return out
}

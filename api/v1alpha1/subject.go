package v1alpha1

// SubjectPattern is a NATS subject pattern: tokens separated by '.', where a
// token that is exactly '*' matches one token and a last token that is
// exactly '>' matches one or more, for example "orders.>" or "orders.*.created".
// The rules are those of nats-server (server.IsValidSubject) with explicit
// limits: at most 1024 bytes and 32 tokens. RE2's \s is exactly the
// whitespace NATS refuses (space, \t, \n, \r, \f).
//
// Beyond nats-server's rules, a pattern whose first token is $WEIGHSTATION
// is refused: those subjects are reserved for weighstation, and sidecars
// never open them to applications. (Wildcards such as '>' still cover
// them; the sidecar keeps them closed.)
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'\s')`,message="invalid subject: tokens must not contain whitespace (space, \\t, \\n, \\r, \\f)"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'(^\.|\.\.|\.$)')`,message="invalid subject: tokens must not be empty (no leading, trailing or double '.')"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'(^|\.)>\.')`,message="invalid subject: '>' is only allowed as the last token"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'^([^.]*\.){32}')`,message="invalid subject: a subject must have at most 32 tokens (MaxTokens)"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'^\$WEIGHSTATION(\.|$)')`,message="reserved subject: $WEIGHSTATION.> is reserved for weighstation; a pattern must not start with the token $WEIGHSTATION"
type SubjectPattern string

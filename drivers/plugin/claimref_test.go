package plugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClaimRefOf(t *testing.T) {
	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  ClaimRef
	}{
		"a claim": {&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", UID: "uid-1", Generation: 3}},
			ClaimRef{Namespace: "ml", Name: "train", UID: "uid-1"}},
		"no claim": {nil, ClaimRef{}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ClaimRefOf(tc.claim)); diff != "" {
				t.Errorf("ClaimRefOf (-want +got):\n%s", diff)
			}
		})
	}
}

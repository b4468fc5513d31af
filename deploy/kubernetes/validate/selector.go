package validate

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func metav1Selector(d *appsv1.Deployment) (labels.Selector, error) {
	return metav1LabelSelector(d.Spec.Selector)
}

func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}
